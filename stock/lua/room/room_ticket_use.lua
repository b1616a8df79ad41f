-- The waiting room: the purchase gate uses a ticket whose signature, owner and expiry the
-- web process has checked. A ticket is single-use: it is consumed when a purchase with it
-- reserves (room_ticket_consume.lua), and a consumed ticket is refused for good, whatever
-- happens to the order after. Until then it may be tried again (after a busy, a rate limit,
-- a sold-out answer while units may come back); the first try frees the shopper's slot in
-- the cap. The stock script's participant check is the guard between a try and its consume.
--
-- KEYS[1] tickets   KEYS[2] tried   KEYS[3] active   KEYS[4] consumed
-- ARGV[1] user id   ARGV[2] the ticket's nonce
--
-- Returns 1 first try, 2 tried before, -1 not the ticket issued (a newer one, or none),
-- -3 consumed.
local issued = redis.call('HGET', KEYS[1], ARGV[1])
if not issued or string.match(issued, '^([^:]+)') ~= ARGV[2] then
  return -1
end
if redis.call('HEXISTS', KEYS[4], ARGV[1]) == 1 then
  return -3
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('HSETNX', KEYS[2], ARGV[1], now) == 0 then
  return 2
end
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
