-- Sharded re-warm, step 1 for one shard: remove its stock key if it still holds what the
-- caller's picture saw, so nothing sells from it (purchases answer "not warmed") until
-- step 2 (warmup.lua, expecting no key) writes its new share. Every shard is frozen before
-- any is written: a round that loses a race leaves shards frozen, never a mix of old and
-- new figures that could count more units than exist.
--
-- KEYS[1] stock   KEYS[2] log
-- ARGV[1] the stock expected now ('' = no key)   ARGV[2] the log's length in the picture
--
-- Returns 1 when frozen (or already without a key and the log unchanged), 0 otherwise.
if not whole(ARGV[2], 0) then
  return redis.error_reply('freeze: bad arguments')
end
local current = redis.call('GET', KEYS[1])
if (current or '') ~= ARGV[1] then
  return 0
end
if not current and redis.call('XLEN', KEYS[2]) ~= tonumber(ARGV[2]) then
  return 0
end
if current then
  redis.call('DEL', KEYS[1])
end
return 1
