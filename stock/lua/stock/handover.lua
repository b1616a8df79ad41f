-- Units the database released to Redis's share join its stock: the reserve once Redis's
-- share could not cover a purchase, and the units of cancelled database-path orders.
-- Idempotent: the caller names the database's count of released units, and only what
-- ``handed`` lacks of it is added, to the stock and to ``loaded``, in one step.
--
-- KEYS[1] stock   KEYS[2] loaded   KEYS[3] handed   KEYS[4] reserve   KEYS[5] restocks
-- (the activity's own tag: shard 0's)
-- ARGV[1] the units the database has released to Redis's share so far
-- ARGV[2] the database reserve left, read after the release ('' = leave ``reserve`` as it
--         is); the database never adds to its reserve once warmed, so a figure read from it
--         is never below what it holds later
--
-- Returns the units added (0 when already there), -1 when not warmed (the next warm-up
-- derives the stock with them), -4 for invalid arguments.
-- Every argument is checked (prelude.lua's whole()) before the first write.
local released = whole(ARGV[1], 0)
if not released or not (ARGV[2] == '' or whole(ARGV[2], 0)) then
  return -4
end
local handed = redis.call('GET', KEYS[3])
if not handed or redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return -1
end
local missing = released - tonumber(handed)
if missing > 0 then
  redis.call('INCRBY', KEYS[1], missing)
  redis.call('INCRBY', KEYS[2], missing)
  redis.call('SET', KEYS[3], released)
  redis.call('INCR', KEYS[5])
end
if ARGV[2] ~= '' and tonumber(redis.call('GET', KEYS[4]) or '0') > tonumber(ARGV[2]) then
  redis.call('SET', KEYS[4], ARGV[2])
end
return math.max(missing, 0)
