-- Tokens into the token filter (a Bloom filter read by shopper_gate.lua): the bits of
-- each token's hashes, in every filter named in KEYS that exists (the one in use and,
-- while `token_cache_fill` rebuilds it, the next one), so that no token is missed.
--
-- KEYS pairs: a filter's bits, its parameters (hash: bits, hashes)
-- ARGV pairs: a token's two hashes (h1, h2); the bit of hash i is (h1 + i * h2) % bits
-- Returns how many filters were written.
local written = 0
for f = 1, #KEYS, 2 do
  local params = redis.call('HMGET', KEYS[f + 1], 'bits', 'hashes')
  if params[1] and redis.call('EXISTS', KEYS[f]) == 1 then
    local bits, hashes = tonumber(params[1]), tonumber(params[2])
    for a = 1, #ARGV, 2 do
      local h1, h2 = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
      for i = 0, hashes - 1 do
        redis.call('SETBIT', KEYS[f], (h1 + i * h2) % bits, 1)
      end
    end
    written = written + 1
  end
end
return written
