-- Give back a reservation that will not become an order (the database guard found
-- no stock, the shopper already had an order, or the replay gave up).
-- Idempotent: acts only while the reservation is still in the log.
--
-- KEYS[1] stock   KEYS[2] users   KEYS[3] log   KEYS[4] failed   KEYS[5] loaded
-- ARGV[1] reservation id   ARGV[2] user id   ARGV[3] quantity
-- ARGV[4] "1" to free the shopper to try again   ARGV[5] reason
-- ARGV[6] (when not freeing) the reservation id of the shopper's live order, to record
--         instead of the released one, so that cancelling that order frees the shopper
-- ARGV[7] "1": the units exist in the database, back on sale; "0": the database has no
--         such units (its guard refused them), so Redis was loaded with them by mistake:
--         they leave ``loaded`` instead, and are never sold again
--
-- Returns 1 when released, 0 when it had been released (or ordered) before, -4 for
-- invalid arguments.
-- Every argument is checked (prelude.lua's whole()) before the first write: a quantity
-- that is no whole number would fail after the XDEL, and a negative one take units.
-- Zero is allowed: a poison entry (quantity 0) is released with nothing to give back.
if (ARGV[1] or '') == '' or not whole(ARGV[2], 1) or not whole(ARGV[3], 0) then
  return -4
end
if redis.call('XDEL', KEYS[3], ARGV[1]) == 0 then
  return 0
end
-- Without a stock key (Redis restarted, or cleaned up) the next warm-up derives the
-- stock from the database and the log; creating the key here would fake a warm-up.
if ARGV[7] == '0' then
  if redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('DECRBY', KEYS[5], ARGV[3])
  end
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCRBY', KEYS[1], ARGV[3])
end
if redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[1] then
  if ARGV[4] == '1' then
    redis.call('HDEL', KEYS[2], ARGV[2])
    redis.call('HSET', KEYS[4], ARGV[2], ARGV[5])
  elseif ARGV[6] and ARGV[6] ~= '' then
    redis.call('HSET', KEYS[2], ARGV[2], ARGV[6])
  end
end
return 1
