-- Give back the units of a cancelled order, once.
--
-- KEYS[1] stock   KEYS[2] users   KEYS[3] returned (set of order numbers)
-- ARGV[1] order number   ARGV[2] quantity   ARGV[3] user id   ARGV[4] reservation id
--
-- Returns 1 when returned now, 0 when it had been returned before or there is no stock
-- key. ``returned`` means "these units are in the stock key": without a key (not warmed,
-- Redis restarted, cleaned up) nothing is recorded, and the next warm-up, which derives
-- the stock without the units of cancelled orders not in the set, returns them itself.
-- -4 for invalid arguments.
-- Every argument is checked (prelude.lua's whole()) before the first write.
if (ARGV[1] or '') == '' or not whole(ARGV[2], 1) or not whole(ARGV[3], 1) then
  return -4
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return 0
end
if redis.call('SADD', KEYS[3], ARGV[1]) == 0 then
  return 0
end
redis.call('INCRBY', KEYS[1], ARGV[2])
-- Free the shopper to try again, unless they already hold a newer reservation.
if redis.call('HGET', KEYS[2], ARGV[3]) == ARGV[4] then
  redis.call('HDEL', KEYS[2], ARGV[3])
end
return 1
