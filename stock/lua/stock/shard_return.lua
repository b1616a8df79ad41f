-- Sharded stock (S > 1): give the units of a cancelled order back to the shard they
-- came from, once; the caller has freed the shopper's claim first (claim_settle.lua).
--
-- KEYS[1] stock (of the shard)   KEYS[2] returned (set of order numbers, of the shard)
-- KEYS[3] restocks (of the shard: counts every rise of its stock)
-- ARGV[1] order number   ARGV[2] quantity
--
-- Returns 1 when returned now, 0 when it had been returned before or the shard has no
-- stock key (nothing recorded then: the next warm-up returns it, as in return.lua);
-- -4 for invalid arguments (checked with prelude.lua's whole() before the first write).
if (ARGV[1] or '') == '' or not whole(ARGV[2], 1) then
  return -4
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('INCRBY', KEYS[1], ARGV[2])
redis.call('INCR', KEYS[3])
return 1
