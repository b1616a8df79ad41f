-- A consistent read of an activity's Redis state for reconciliation and warm-up.
--
-- KEYS[1] stock   KEYS[2] loaded   KEYS[3] log   KEYS[4] returned
-- ARGV none
-- Returns {stock or false, loaded or false, log entries as a flat list, size of returned}
--
-- The size of ``returned`` is read in the same step as the stock: a return moves both,
-- so a reader comparing two snapshots sees every return between them.
local entries = redis.call('XRANGE', KEYS[3], '-', '+')
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), entries, redis.call('SCARD', KEYS[4])}
