-- The waiting room: a ticket for a shopper the room has let in. The caller signs what
-- this answers (seckill.room); Redis keeps "<nonce>:<window end ms>" so the same ticket is
-- answered again, and the purchase gate knows the nonce.
--
-- KEYS[1] state   KEYS[2] places   KEYS[3] active   KEYS[4] tickets   KEYS[5] used
-- KEYS[6] stock (S = 1)   KEYS[7] pre   KEYS[8] reserve (S = 1)   KEYS[9] consumed
-- ARGV[1] user id   ARGV[2] a fresh nonce (kept only if none was issued yet)
-- ARGV[3] the units left as the caller read them (S > 1; -1 unknown), or '' to read the
--         stock and the reserve here (S = 1)
--
-- Returns {code, place or nonce, serving or window end (ms)}:
--    1 {nonce, window end}   2 {nonce, window end}: tried by a purchase that did not reserve
--   -1 not joined   -2 not yet {place, serving}   -3 used: a purchase with it reserved
--   -4 window over (no-show)   -5 in the pre-queue, draw not made
--   -6 sold out (for a waiting shopper too)
local place = redis.call('HGET', KEYS[2], ARGV[1])
if not place then
  if redis.call('SISMEMBER', KEYS[7], ARGV[1]) == 1 then
    return {-5, 0, 0}
  end
  return {-1, 0, 0}
end
if redis.call('HEXISTS', KEYS[9], ARGV[1]) == 1 then
  return {-3, 0, 0}
end
place = tonumber(place)
local sold
if ARGV[3] ~= '' then
  sold = tonumber(ARGV[3]) == 0
else
  local stock = redis.call('GET', KEYS[6])
  sold = stock and tonumber(stock) + tonumber(redis.call('GET', KEYS[8]) or '0') <= 0
end
local serving = tonumber(redis.call('HGET', KEYS[1], 'serving') or '0')
if place > serving then
  if sold then
    return {-6, place, 0}
  end
  return {-2, place, serving}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local issued = redis.call('HGET', KEYS[4], ARGV[1])
local ends
if issued then
  ends = tonumber(string.match(issued, ':(%d+)$') or '0')
else
  ends = tonumber(redis.call('ZSCORE', KEYS[3], ARGV[1]) or '0')
end
if ends <= now then
  return {-4, place, 0}
end
if issued and redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then
  return {2, string.match(issued, '^([^:]+)'), ends}
end
if sold then
  return {-6, place, 0}
end
if not issued then
  issued = ARGV[2] .. ':' .. ends
  redis.call('HSET', KEYS[4], ARGV[1], issued)
end
return {1, string.match(issued, '^([^:]+)'), ends}
