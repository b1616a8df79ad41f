-- One purchase, in one atomic step: participation check, stock check, deduction,
-- participant record and reservation-log append.
--
-- KEYS[1] stock   KEYS[2] users (hash)   KEYS[3] log (stream)   KEYS[4] failed (hash)
-- ARGV[1] user id   ARGV[2] quantity   ARGV[3] per-user limit   ARGV[4] shard
--
-- Returns {code, remaining, reservation id}:
--    1 reserved   -1 duplicate   -2 sold out   -3 not warmed   -4 invalid arguments
local qty = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
-- Second line of defence: the web process validated these already.
if not qty or not limit or qty < 1 or qty ~= math.floor(qty) or qty > limit then
  return {-4, 0, ''}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  -- A missing key must never read as "sold out".
  return {-3, 0, ''}
end
stock = tonumber(stock)
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {-1, stock, ''}
end
if stock < qty then
  return {-2, stock, ''}
end
local remaining = redis.call('DECRBY', KEYS[1], qty)
local id = redis.call('XADD', KEYS[3], '*', 'u', ARGV[1], 'q', qty, 's', ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], id)
-- A new reservation supersedes an earlier one that failed (for the result endpoint).
redis.call('HDEL', KEYS[4], ARGV[1])
return {1, remaining, id}
