-- Sharded stock (S > 1): change a shopper's claim in their user partition, but only
-- while it is still the one the caller knows (a newer reservation is left alone).
--
-- KEYS[1] users   KEYS[2] failed   KEYS[3] pending (sorted set of unsettled claims)
-- ARGV[1] user id   ARGV[2] the claim expected now
-- ARGV[3] the new claim ('' = remove it: the shopper may try again)
-- ARGV[4] a failure reason to record ('' = none)
--
-- Returns 1 when changed, 0 when the claim was something else.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
-- The new claim names a reservation, or there is none: nothing pending any more.
redis.call('ZREM', KEYS[3], ARGV[1])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[4])
end
return 1
