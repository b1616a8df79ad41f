-- The waiting room's clock, in one atomic step: expire the no-shows, close the room when
-- the stock is gone (reopen it when units come back), and move "now serving" on at the
-- admission rate, never past the cap on admitted-not-done shoppers nor past the units left
-- for them. Run every second by beat for each live room (seckill.tasks.room_ticks_task),
-- and by whoever reads the room (at most twice a second per web process).
-- The close is recorded at the sell-out, not at the tick that sees it: with the log given,
-- the last reservation appended since the previous tick (the stream's last id) is the one
-- that took the last unit; without it (S > 1), the tick's own time.
--
-- KEYS[1] state (hash)   KEYS[2] queue (list)   KEYS[3] active (zset: user -> window end ms)
-- KEYS[4] admitted (hash: user -> ms)   KEYS[5] stock (the activity's stock key, S = 1)
-- KEYS[6] rate samples (list)   KEYS[7] reserve (S = 1: the database reserve not handed over)
-- KEYS[8] (optional, S = 1) the reservation log (stream)
-- ARGV[1] rate (shoppers/s, >= 1)   ARGV[2] cap (0 = none)   ARGV[3] window (ms)
-- ARGV[4] the units left as the caller read them (S > 1: every shard and the reserve; -1
--         unknown), or '' to read them here (S = 1: the stock and the reserve)
--
-- Returns {sealed, serving, queue length, active, no-shows, used, closed at (ms or ''),
--          paused, stock (-1 unknown), now (ms), oldest rate sample ("ms:serving" or '')}
local rate = whole(ARGV[1], 1)
local cap = whole(ARGV[2], 0)
local window = whole(ARGV[3], 1)
if not rate or not cap or not window then
  return redis.error_reply('room_tick: bad arguments')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local st = redis.call('HMGET', KEYS[1], 'sealed', 'serving', 'ts', 'credit', 'paused', 'closed_ms', 'noshows', 'used')
local qlen = redis.call('LLEN', KEYS[2])
local stock
if ARGV[4] ~= '' then
  stock = tonumber(ARGV[4]) or -1
else
  stock = redis.call('GET', KEYS[5])
  stock = stock and tonumber(stock) + tonumber(redis.call('GET', KEYS[7]) or '0') or -1
end
local paused = st[5] or '0'
if st[1] ~= '1' then
  return {0, 0, qlen, 0, 0, 0, '', paused, stock, now, ''}
end
local serving = tonumber(st[2]) or 0
local ts = tonumber(st[3]) or now
local credit = tonumber(st[4]) or 0
local closed = st[6]
local noshows = tonumber(st[7]) or 0
-- No-shows: their window is over; their slot is free again.
local gone = redis.call('ZCOUNT', KEYS[3], '-inf', now)
if gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  noshows = redis.call('HINCRBY', KEYS[1], 'noshows', gone)
end
local active = redis.call('ZCARD', KEYS[3])
if stock == 0 or stock < -1 then
  if not closed then
    local at = now
    if KEYS[8] then
      local info = redis.pcall('XINFO', 'STREAM', KEYS[8])
      if type(info) == 'table' and not info.err then
        for i = 1, #info - 1, 2 do
          if info[i] == 'last-generated-id' then
            local last = tonumber(string.match(info[i + 1], '^(%d+)') or '0')
            if last > ts and last <= now then
              at = last
            end
          end
        end
      end
    end
    closed = tostring(at)
    redis.call('HSET', KEYS[1], 'closed_ms', closed)
    redis.call('HINCRBY', KEYS[1], 'closes', 1)
  end
  credit = 0
else
  if closed then
    redis.call('HDEL', KEYS[1], 'closed_ms')
    redis.call('HINCRBY', KEYS[1], 'reopens', 1)
    closed = nil
  end
  if paused == '1' then
    credit = 0
  else
    -- At most one second's admissions banked: a quiet spell is no burst.
    credit = math.min(credit + math.max(0, now - ts) * rate / 1000, rate)
    local n = math.floor(credit)
    if cap > 0 then
      n = math.min(n, cap - active)
    end
    if stock > 0 then
      n = math.min(n, stock - active)
    end
    n = math.min(n, qlen - serving)
    if n > 0 then
      local ids = redis.call('LRANGE', KEYS[2], serving, serving + n - 1)
      for _, id in ipairs(ids) do
        redis.call('ZADD', KEYS[3], now + window, id)
        redis.call('HSET', KEYS[4], id, now)
      end
      serving = serving + n
      active = active + n
    end
    -- Whole credits not spent (the cap, the stock or the queue held them) are not kept.
    credit = credit - math.floor(credit)
  end
end
redis.call('HSET', KEYS[1], 'serving', serving, 'ts', now, 'credit', tostring(credit))
local head = redis.call('LINDEX', KEYS[6], 0)
if not head or now - tonumber(string.match(head, '^(%d+)')) >= 1000 then
  redis.call('LPUSH', KEYS[6], now .. ':' .. serving)
  redis.call('LTRIM', KEYS[6], 0, 10)
end
local oldest = redis.call('LINDEX', KEYS[6], -1) or ''
return {1, serving, qlen, active, noshows, tonumber(st[8]) or 0, closed or '', paused, stock, now, oldest}
