-- Load an activity's stock. Participants are restored by the caller first; setting
-- the stock key last is what makes the activity "warmed".
--
-- KEYS[1] stock   KEYS[2] loaded
-- ARGV[1] remaining   ARGV[2] loaded   ARGV[3] "1" to overwrite an existing stock key
--
-- Returns {1, remaining} when written, {0, current} when refused.
if ARGV[3] ~= '1' then
  local current = redis.call('GET', KEYS[1])
  if current then
    return {0, tonumber(current)}
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return {1, tonumber(ARGV[1])}
