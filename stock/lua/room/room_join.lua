-- The waiting room: a shopper joins (seckill.room.queue.room_join). One place per account:
-- joining again answers the same place.
--
-- KEYS[1] state (hash)   KEYS[2] pre (set)   KEYS[3] queue (list)   KEYS[4] places (hash)
-- ARGV[1] user id        ARGV[2] the sale's start (Unix ms)
-- ARGV[3] a seed for the draw (64 lower-case hex digits): kept as the room's seed when it has
--         none yet (HSETNX), so the seed is committed to before anyone joins, in the same step
--
-- Returns {code, place}:
--    1 placed (place)   2 in the pre-queue (its place comes with the draw at the start)
--    3 started and the draw not made yet: the caller makes it (room_seal) and asks again
--   -4 invalid arguments
-- Before the start (on Redis's clock) a joiner goes into the pre-queue set; after the draw
-- (``sealed``) a new joiner takes the next place, first come first served.
local user = ARGV[1]
local start_ms = whole(ARGV[2], 0)
local seed = ARGV[3]
if not whole(user, 1) or not start_ms or not seed or #seed ~= 64 or seed:find('[^0-9a-f]') then
  return {-4, 0}
end
local place = redis.call('HGET', KEYS[4], user)
if place then
  return {1, tonumber(place)}
end
redis.call('HSETNX', KEYS[1], 'seed', seed)
if redis.call('HGET', KEYS[1], 'sealed') ~= '1' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if now < start_ms then
    redis.call('SADD', KEYS[2], user)
    return {2, 0}
  end
  return {3, 0}
end
place = redis.call('RPUSH', KEYS[3], user)
redis.call('HSET', KEYS[4], user, place)
return {1, place}
