-- One purchase, in one atomic step: participation check, stock check, deduction,
-- participant record and reservation-log append.
--
-- KEYS[1] stock   KEYS[2] users (hash)   KEYS[3] log (stream)   KEYS[4] failed (hash)
-- KEYS[5] drain (flag: a drain task has been asked for)
-- KEYS[6] reserve (units of the database reserve not handed to Redis yet)
-- ARGV[1] user id   ARGV[2] quantity   ARGV[3] per-user limit   ARGV[4] shard
-- ARGV[5] lifetime of the drain flag in milliseconds
--
-- Returns {code, remaining, reservation id, kick}:
--    1 reserved   -1 duplicate   -2 sold out   -3 not warmed   -4 invalid arguments
--   -5 held: too few units here, but the database reserve still holds some; the caller
--      hands the reserve over and asks again, so "sold out" is said only when it is final
-- remaining: the units still for sale, the reserve's included.
-- kick = 1 when this reservation set the drain flag: the caller then asks a worker to
-- drain the log. Everyone else leaves it to that task, so a flood publishes a handful of
-- messages a second instead of one per purchase.
-- Every argument is checked (prelude.lua's whole()) before the first write.
local qty = whole(ARGV[2], 1)
local limit = whole(ARGV[3], 1)
-- Second line of defence: the web process validated these already.
if not whole(ARGV[1], 1) or not qty or not limit or qty > limit or not whole(ARGV[4], 0) or not whole(ARGV[5], 1) then
  return {-4, 0, ''}
end
local stock = redis.call('GET', KEYS[1])
if not stock then
  -- A missing key must never read as "sold out".
  return {-3, 0, ''}
end
stock = tonumber(stock)
local held = tonumber(redis.call('GET', KEYS[6]) or '0')
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then
  return {-1, stock + held, ''}
end
if stock < qty then
  if held > 0 then
    return {-5, stock + held, ''}
  end
  return {-2, stock, ''}
end
local remaining = redis.call('DECRBY', KEYS[1], qty) + held
local id = redis.call('XADD', KEYS[3], '*', 'u', ARGV[1], 'q', qty, 's', ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], id)
-- A new reservation supersedes an earlier one that failed (for the result endpoint).
redis.call('HDEL', KEYS[4], ARGV[1])
local kick = 0
if redis.call('SET', KEYS[5], '1', 'NX', 'PX', ARGV[5]) then
  kick = 1
end
return {1, remaining, id, kick}
