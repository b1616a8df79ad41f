-- Load an activity's stock. Participants are restored by the caller first; setting
-- the stock key last is what makes the activity "warmed".
--
-- A compare-and-set: the caller derived ``remaining`` from a snapshot in which the
-- stock was ARGV[3]; a purchase or release since then changed it, and the caller must
-- derive again rather than overwrite a live sale with a stale figure. Without a stock
-- key nothing can buy, but a release still removes its log entry (and gives its units
-- to no key): the log must also be as long as in the snapshot (ARGV[4]).
--
-- KEYS[1] stock   KEYS[2] loaded   KEYS[3] log   KEYS[4] epoch
-- ARGV[1] remaining   ARGV[2] loaded   ARGV[3] the stock expected now ('' = no key)
-- ARGV[4] the log's length in the snapshot   ARGV[5] this warm-up's epoch (stock.identity)
--
-- Returns 1 when written, 0 when the stock was not what the caller expected, -4 for
-- invalid arguments.
-- Every argument is checked before the first write: a script that fails half-way would
-- leave a partial write behind (Redis does not roll back).
local function whole(value, least)
  if type(value) ~= 'string' or not string.match(value, '^%-?%d+$') then
    return nil
  end
  local n = tonumber(value)
  if n < least then
    return nil
  end
  return n
end
if not whole(ARGV[1], 0) or not whole(ARGV[2], 0) or not (ARGV[3] == '' or whole(ARGV[3], 0))
    or not whole(ARGV[4], 0) then
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
return 1
