-- The waiting room's draw at the start: the pre-queue, in the order the caller computed
-- from the published seed (seckill.room.draw.draw_order), becomes places 1..N; later joiners
-- queue behind. Refused unless the pre-queue is exactly the set the order was made of.
--
-- KEYS[1] state (hash)   KEYS[2] pre (set)   KEYS[3] queue (list)   KEYS[4] places (hash)
-- ARGV[1] the sale's start (Unix ms)   ARGV[2] the seed   ARGV[3] N   ARGV[4..] user ids in order
--
-- Returns 1 sealed now, 0 sealed already, -1 not started yet (Redis's clock),
-- -2 the pre-queue changed (the caller reads it again), -3 the seed is not the room's.
if redis.call('HGET', KEYS[1], 'sealed') == '1' then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if now < tonumber(ARGV[1]) then
  return -1
end
local count = tonumber(ARGV[3])
if redis.call('SCARD', KEYS[2]) ~= count or #ARGV - 3 ~= count then
  return -2
end
if redis.call('HGET', KEYS[1], 'seed') ~= ARGV[2] then
  return -3
end
for i = 4, #ARGV do
  if redis.call('SISMEMBER', KEYS[2], ARGV[i]) ~= 1 then
    return -2
  end
end
-- Every check passed: now the writes.
for i = 4, #ARGV do
  redis.call('RPUSH', KEYS[3], ARGV[i])
  redis.call('HSET', KEYS[4], ARGV[i], i - 3)
end
redis.call('HSET', KEYS[1], 'sealed', '1', 'sealed_ms', now, 'prequeue', count, 'serving', 0, 'ts', now, 'credit', 0)
return 1
