-- The waiting room: a purchase with the shopper's ticket reserved, so the ticket is used,
-- once and for good (room_ticket_use.lua and room_ticket.lua refuse it from now on).
--
-- KEYS[1] consumed (hash: user id -> nonce)   KEYS[2] state (its ``used`` count)
-- ARGV[1] user id   ARGV[2] the ticket's nonce
--
-- Returns 1 consumed now, 0 consumed before.
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[2], 'used', 1)
return 1
