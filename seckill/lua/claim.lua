-- Sharded stock (S > 1), step 1 of a purchase: claim the shopper's place in their user
-- partition before any shard is touched ("one per user" cannot live in a shard).
--
-- KEYS[1] users (hash, of the partition)   KEYS[2] failed (hash, of the partition)
-- ARGV[1] user id   ARGV[2] the pending claim value
--
-- Returns 1 when claimed now, 0 when the shopper holds a claim already (duplicate).
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
-- A new attempt supersedes an earlier failure (for the result endpoint).
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
