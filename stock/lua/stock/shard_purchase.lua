-- Sharded stock (S > 1), step 2 of a purchase: take units from one shard. The shopper's
-- claim was taken in their user partition before (claim.lua).
--
-- KEYS[1] stock (of the shard)   KEYS[2] log (stream, of the shard)
-- KEYS[3] drain (flag, of the shard: a drain task has been asked for)
-- ARGV[1] user id   ARGV[2] quantity   ARGV[3] per-user limit   ARGV[4] shard
-- ARGV[5] lifetime of the drain flag in milliseconds
--
-- Returns {code, remaining, reservation id, kick}:
--    1 reserved   -2 sold out   -3 not warmed   -4 invalid arguments
-- kick = 1 when this reservation set the shard's drain flag (as in purchase.lua; the
-- drain task drains every shard's log, so S shards ask at most S times per lifetime).
-- Every argument is checked (prelude.lua's whole()) before the first write.
local qty = whole(ARGV[2], 1)
local limit = whole(ARGV[3], 1)
if not whole(ARGV[1], 1) or not qty or not limit or qty > limit or not whole(ARGV[4], 0) or not whole(ARGV[5], 1) then
  return {-4, 0, '', 0}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  -- A missing key must never read as "sold out".
  return {-3, 0, '', 0}
end
stock = tonumber(stock)
if stock < qty then
  return {-2, stock, '', 0}
end
local remaining = redis.call('DECRBY', KEYS[1], qty)
local id = redis.call('XADD', KEYS[2], '*', 'u', ARGV[1], 'q', qty, 's', ARGV[4])
local kick = 0
if redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[5]) then
  kick = 1
end
return {1, remaining, id, kick}
