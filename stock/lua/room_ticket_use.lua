-- The waiting room: the purchase gate uses a ticket whose signature, owner and expiry the
-- web process has checked. Once only: the first use wins, and the shopper's slot is free.
--
-- KEYS[1] tickets   KEYS[2] used   KEYS[3] active   KEYS[4] state
-- ARGV[1] user id   ARGV[2] the ticket's nonce
--
-- Returns 1 used now, -1 not the ticket issued (a newer one, or none), -2 used before.
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[2], ARGV[1], now) == 0 then
  return -2
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[4], 'used', 1)
return 1
