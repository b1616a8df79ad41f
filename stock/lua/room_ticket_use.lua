-- The waiting room: the purchase gate uses a ticket whose signature, owner and expiry the
-- web process has checked. The first use frees the shopper's slot in the cap and counts
-- as used; a later one (after a purchase that failed: busy, rate limited…) is let through
-- again, and the caller refuses it only if the shopper's participant record says that
-- purchase bought. The stock script's participant check is the final guard either way.
--
-- KEYS[1] tickets   KEYS[2] used   KEYS[3] active   KEYS[4] state
-- ARGV[1] user id   ARGV[2] the ticket's nonce
--
-- Returns 1 first use, 2 tried before, -1 not the ticket issued (a newer one, or none).
local issued = redis.call('HGET', KEYS[1], ARGV[1])
if not issued or string.match(issued, '^([^:]+)') ~= ARGV[2] then
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[2], ARGV[1], now) == 0 then
  return 2
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[4], 'used', 1)
return 1
