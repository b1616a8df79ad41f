-- Who the shopper is and whether they are over a rate limit, in one round trip: a
-- purchase from a shopper this web process has not met yet looks the API token up in the
-- shared token cache and counts the request against the limits in the same call.
-- Fixed windows of PERIOD seconds on Redis's own clock, shared by every web process.
-- Runs on the cache Redis, a single node: the counters' names depend on the user id read
-- here, so they cannot all be declared in KEYS (as a Cluster would want).
--
-- KEYS[1] the token's entry in the shared token cache ("user_id:username"); read only
--         when ARGV[1] is empty
-- ARGV[1] the user id when the caller knows it, else ''
-- ARGV[2] '1': count this request against the limits; '0': look the token up only
-- ARGV[3] per-user counter prefix ('' = no such limit)   ARGV[4] its limit   ARGV[5] period, s
-- ARGV[6] per-address counter name ('' = no such limit)  ARGV[7] its limit   ARGV[8] period, s
--
-- Returns {shopper, over, ms_left}: shopper = the cache entry, or ARGV[1]; false when
-- the token is not in the cache. over = 0, 1 (per user) or 2 (per address); ms_left =
-- until the window that is over ends. A shopper over the per-user limit is not counted
-- against the address's.
local shopper = ARGV[1]
local uid = shopper
if shopper == '' then
  shopper = redis.call('GET', KEYS[1])
  if not shopper then
    return {false, 0, 0}
  end
  uid = string.match(shopper, '^(%d+):')
end
if ARGV[2] ~= '1' then
  return {shopper, 0, 0}
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function over(name, limit, period)
  limit = tonumber(limit)
  local period_ms = tonumber(period) * 1000
  local key = name .. ':' .. math.floor(now_ms / period_ms)
  local count = redis.call('INCR', key)
  if count == 1 then
    redis.call('PEXPIRE', key, period_ms + 1000)
  end
  if count > limit then
    return period_ms - (now_ms % period_ms)
  end
  return 0
end

local left
if ARGV[3] ~= '' then
  left = over(ARGV[3] .. ':' .. uid, ARGV[4], ARGV[5])
  if left > 0 then
    return {shopper, 1, left}
  end
end
if ARGV[6] ~= '' then
  left = over(ARGV[6], ARGV[7], ARGV[8])
  if left > 0 then
    return {shopper, 2, left}
  end
end
return {shopper, 0, 0}
