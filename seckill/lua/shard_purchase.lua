-- Sharded stock (S > 1), step 2 of a purchase: take units from one shard. The shopper's
-- claim was taken in their user partition before (claim.lua).
--
-- KEYS[1] stock (of the shard)   KEYS[2] log (stream, of the shard)
-- ARGV[1] user id   ARGV[2] quantity   ARGV[3] per-user limit   ARGV[4] shard
--
-- Returns {code, remaining, reservation id}:
--    1 reserved   -2 sold out   -3 not warmed   -4 invalid arguments
local qty = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
if not qty or not limit or qty < 1 or qty ~= math.floor(qty) or qty > limit then
  return {-4, 0, ''}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  -- A missing key must never read as "sold out".
  return {-3, 0, ''}
end
stock = tonumber(stock)
if stock < qty then
  return {-2, stock, ''}
end
local remaining = redis.call('DECRBY', KEYS[1], qty)
local id = redis.call('XADD', KEYS[2], '*', 'u', ARGV[1], 'q', qty, 's', ARGV[4])
return {1, remaining, id}
