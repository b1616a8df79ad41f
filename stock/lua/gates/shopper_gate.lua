-- Who the shopper is and whether they are over a rate limit, in one round trip: a
-- purchase from a shopper this web process has not met yet looks the API token up in the
-- shared token cache and counts the request against the limits in the same call.
-- A token the cache does not hold is checked against the refused-token cache and the
-- token filter (a Bloom filter of every token's digest), and a refused one is counted
-- against the address's failed-authentication limit: a flood of made-up tokens never
-- reaches the database.
-- Fixed windows of PERIOD seconds on Redis's own clock, shared by every web process.
-- Runs on the cache Redis, a single node: the counters' names depend on the user id read
-- here, so they cannot all be declared in KEYS (as a Cluster would want).
--
-- KEYS[1] the token's entry in the shared token cache ("user_id:username:mac"); KEYS[2]
--         its entry in the refused-token cache; KEYS[3], KEYS[4] the token filter's bits
--         and its parameters (hash: bits, hashes). Read only when ARGV[1] is empty
-- ARGV[1] the user id when the caller knows it, else ''
-- ARGV[2] '1': count this request against the limits; '0': look the token up only;
--         'refused': the database refused the token: remember it and count the failure
-- ARGV[3] per-user counter prefix ('' = no such limit)   ARGV[4] its limit   ARGV[5] period, s
-- ARGV[6] per-address counter name ('' = no such limit)  ARGV[7] its limit   ARGV[8] period, s
-- ARGV[9] failed-authentication counter of the address ('' = none)
--         ARGV[10] its limit   ARGV[11] period, s
-- ARGV[12], ARGV[13] the token's two hashes in the filter   ARGV[14] refused-token TTL, ms
--
-- Returns {shopper, over, ms_left}: shopper = the cache entry, or ARGV[1]; false when
-- the token is not in the cache. over = 0, 1 (per user), 2 (per address), 3 (the token
-- does not exist: 401) or 4 (the address is over its failed-authentication limit: 429);
-- ms_left = until the window that is over ends. A shopper over the per-user limit is not
-- counted against the address's. shopper false with over 0: ask the database.
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function window(name, period)
  local period_ms = tonumber(period) * 1000
  return name .. ':' .. math.floor(now_ms / period_ms), period_ms
end

local function over(name, limit, period)
  local key, period_ms = window(name, period)
  local count = redis.call('INCR', key)
  if count == 1 then
    redis.call('PEXPIRE', key, period_ms + 1000)
  end
  if count > tonumber(limit) then
    return period_ms - (now_ms % period_ms)
  end
  return 0
end

local function failures_over()
  -- Already over, without counting this request (it may be a real token).
  if ARGV[9] == '' then
    return 0
  end
  local key, period_ms = window(ARGV[9], ARGV[11])
  if tonumber(redis.call('GET', key) or '0') >= tonumber(ARGV[10]) then
    return period_ms - (now_ms % period_ms)
  end
  return 0
end

local function may_exist()
  -- No filter (never built, or evicted): every token may exist.
  local params = redis.call('HMGET', KEYS[4], 'bits', 'hashes')
  if not params[1] or redis.call('EXISTS', KEYS[3]) == 0 then
    return true
  end
  local bits, hashes = tonumber(params[1]), tonumber(params[2])
  local h1, h2 = tonumber(ARGV[12]), tonumber(ARGV[13])
  for i = 0, hashes - 1 do
    if redis.call('GETBIT', KEYS[3], (h1 + i * h2) % bits) == 0 then
      return false
    end
  end
  return true
end

local shopper = ARGV[1]
local uid = shopper
if shopper == '' then
  shopper = redis.call('GET', KEYS[1])
  if ARGV[2] == 'refused' then
    redis.call('SET', KEYS[2], '1', 'PX', ARGV[14])
    shopper = false
  end
  if not shopper then
    if ARGV[2] == 'refused' or redis.call('EXISTS', KEYS[2]) == 1 or not may_exist() then
      if ARGV[9] ~= '' then
        local left = over(ARGV[9], ARGV[10], ARGV[11])
        if left > 0 then
          return {false, 4, left}
        end
      end
      return {false, 3, 0}
    end
    local left = failures_over()
    if left > 0 then
      return {false, 4, left}  -- the database is not asked for this address any more
    end
    return {false, 0, 0}
  end
  uid = string.match(shopper, '^(%d+):')
  if not uid then
    return {false, 0, 0}  -- not an entry this project wrote: the database decides
  end
end
if ARGV[2] ~= '1' then
  return {shopper, 0, 0}
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
