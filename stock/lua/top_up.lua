-- Units join a live shard's stock (the database reserve, released once Redis's share has
-- sold out). Idempotent: the caller names the shard's ``loaded`` after the top-up, and
-- only the part not there yet is added, to ``loaded`` and to the stock in one step.
--
-- KEYS[1] stock   KEYS[2] loaded
-- ARGV[1] the shard's loaded after the top-up
--
-- Returns the units added (0 when already there), -1 when the shard is not warmed (the
-- next warm-up derives the stock with them), -4 for an invalid argument.
local target = ARGV[1]
if type(target) ~= 'string' or not string.match(target, '^%d+$') then
  return -4
end
target = tonumber(target)
local loaded = redis.call('GET', KEYS[2])
if not loaded or redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
local missing = target - tonumber(loaded)
if missing <= 0 then
  return 0
end
redis.call('INCRBY', KEYS[1], missing)
redis.call('SET', KEYS[2], target)
return missing
