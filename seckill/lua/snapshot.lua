-- A consistent read of an activity's Redis state for reconciliation and warm-up.
--
-- KEYS[1] stock   KEYS[2] loaded   KEYS[3] log
-- Returns {stock or false, loaded or false, log entries as a flat list}
local entries = redis.call('XRANGE', KEYS[3], '-', '+')
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), entries}
