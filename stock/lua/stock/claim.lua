-- Sharded stock (S > 1), step 1 of a purchase: claim the shopper's place in their user
-- partition before any shard is touched ("one per user" cannot live in a shard).
--
-- KEYS[1] users (hash, of the partition)   KEYS[2] failed (hash, of the partition)
-- KEYS[3] pending (sorted set, of the partition: claims not settled yet, by time)
-- ARGV[1] user id   ARGV[2] the pending claim value   ARGV[3] its time in milliseconds
--
-- Returns 1 when claimed now, otherwise the claim the shopper holds (a duplicate, or a
-- pending claim that the caller may find was left behind by an error); -4 for invalid arguments.
-- Every argument is checked (prelude.lua's whole()) before the first write.
if not whole(ARGV[1], 1) or (ARGV[2] or '') == '' or not whole(ARGV[3], 0) then
  return -4
end
local held = redis.call('HGET', KEYS[1], ARGV[1])
if held then
  return held
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
-- A new attempt supersedes an earlier failure (for the result endpoint).
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
