-- The global admission cap of one activity: a token bucket, refilled continuously at
-- ARGV[1] tokens per second up to ARGV[2], one token per purchase let through.
-- Read, refill, take and write back in one atomic step, on Redis's own clock, so every
-- web process shares one bucket whatever their clocks say.
--
-- KEYS[1] bucket (hash: tokens, ts in ms)
-- ARGV[1] rate per second (whole, >= 1)   ARGV[2] burst (whole, >= 1)
--
-- Returns {admitted (1/0), milliseconds until a token is there (0 when admitted)}.
local rate = whole(ARGV[1], 1)
local burst = whole(ARGV[2], 1)
if not rate or not burst then
  return redis.error_reply('admission: bad arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if not tokens or not ts then
  tokens, ts = burst, now
end
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate / 1000)
local admitted, wait = 0, 0
if tokens >= 1 then
  tokens = tokens - 1
  admitted = 1
else
  wait = math.ceil((1 - tokens) * 1000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', now)
-- A full bucket is the same as no key: let idle buckets go.
redis.call('PEXPIRE', KEYS[1], math.ceil(burst * 1000 / rate) + 1000)
return {admitted, wait}
