-- Sharded stock (S > 1): give a reservation's units back to its shard; the caller then
-- settles the shopper's claim in the user partition (claim_settle.lua).
-- Idempotent: acts only while the reservation is still in the shard's log.
--
-- KEYS[1] stock (of the shard)   KEYS[2] log (of the shard)   KEYS[3] loaded (of the shard)
-- KEYS[4] restocks (of the shard: counts every rise of its stock)
-- ARGV[1] reservation id   ARGV[2] quantity
-- ARGV[3] "1": back on sale; "0": the database has no such units, they leave ``loaded``
--
-- Returns 1 when released, 0 when it had been released (or ordered) before, -4 for
-- invalid arguments (checked with prelude.lua's whole() before the first write).
if (ARGV[1] or '') == '' or not whole(ARGV[2], 0) then  -- 0: a poison entry, nothing to give back
  return -4
end
if redis.call('XDEL', KEYS[2], ARGV[1]) == 0 then
  return 0
end
-- No stock key: the next warm-up derives the stock from the database and the logs.
if ARGV[3] == '0' then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('DECRBY', KEYS[3], ARGV[2])
  end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCRBY', KEYS[1], ARGV[2])
  redis.call('INCR', KEYS[4])
end
return 1
