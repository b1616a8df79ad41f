-- Load an activity's stock. Participants are restored by the caller first; setting
-- the stock key last is what makes the activity "warmed".
--
-- A compare-and-set: the caller derived ``remaining`` from a snapshot in which the
-- stock was ARGV[3]; a purchase or release since then changed it, and the caller must
-- derive again rather than overwrite a live sale with a stale figure. Without a stock
-- key nothing can buy, but a release still removes its log entry (and gives its units
-- to no key): the log must also be as long as in the snapshot (ARGV[4]).
--
-- KEYS[1] stock   KEYS[2] loaded   KEYS[3] log   KEYS[4] epoch   KEYS[5] reserve
-- KEYS[6] handed   KEYS[7] restocks
-- ARGV[1] remaining   ARGV[2] loaded   ARGV[3] the stock expected now ('' = no key)
-- ARGV[4] the log's length in the snapshot   ARGV[5] this warm-up's epoch (stock.identity)
-- ARGV[6] the database reserve not handed over   ARGV[7] the units the database handed
-- to Redis's share so far (both '' for a shard other than 0: they live on the activity's tag)
--
-- Returns 1 when written, 0 when the stock was not what the caller expected, -4 for
-- invalid arguments.
-- Every argument is checked (prelude.lua's whole()) before the first write.
if not whole(ARGV[1], 0) or not whole(ARGV[2], 0) or not (ARGV[3] == '' or whole(ARGV[3], 0))
    or not whole(ARGV[4], 0) or not (ARGV[6] == '' or whole(ARGV[6], 0))
    or not (ARGV[7] == '' or whole(ARGV[7], 0)) then
  return -4
end
local current = redis.call('GET', KEYS[1])
if (current or '') ~= ARGV[3] then
  return 0
end
if not current and redis.call('XLEN', KEYS[3]) ~= tonumber(ARGV[4]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
redis.call('SET', KEYS[4], ARGV[5])
if ARGV[6] ~= '' then
  redis.call('SET', KEYS[5], ARGV[6])
  redis.call('SET', KEYS[6], ARGV[7])
end
-- A rewritten stock may be higher than any reader saw: it counts as a rise.
redis.call('INCR', KEYS[7])
return 1
