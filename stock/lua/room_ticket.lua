-- The waiting room: a ticket for a shopper the room has let in. The caller signs what
-- this answers (seckill.room); Redis keeps "<nonce>:<window end ms>" so the same ticket is
-- answered again, and the purchase gate knows the nonce.
--
-- KEYS[1] state   KEYS[2] places   KEYS[3] active   KEYS[4] tickets   KEYS[5] used
-- KEYS[6] stock   KEYS[7] pre
-- ARGV[1] user id   ARGV[2] a fresh nonce (kept only if none was issued yet)
--
-- Returns {code, place or nonce, serving or window end (ms)}:
--    1 {nonce, window end}   2 {nonce, window end}: tried by a purchase before (the caller
--    asks the stock's participant record whether that purchase bought: then it is used)
--   -1 not joined   -2 not yet {place, serving}   -4 window over (no-show)
--   -5 in the pre-queue, draw not made   -6 sold out (for a waiting shopper too)
local place = redis.call('HGET', KEYS[2], ARGV[1])
if not place then
  if redis.call('SISMEMBER', KEYS[7], ARGV[1]) == 1 then
    return {-5, 0, 0}
  end
  return {-1, 0, 0}
end
place = tonumber(place)
local stock = redis.call('GET', KEYS[6])
local sold = stock and tonumber(stock) <= 0
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
