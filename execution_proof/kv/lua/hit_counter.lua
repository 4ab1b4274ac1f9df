-- hit_counter: count one request in a fixed-window counter unless its limit is reached.
--
-- KEYS[1] the counter for one window (string integer; expires after the window)
-- ARGV[1] the limit: the request is refused when the counter already holds this many
-- ARGV[2] seconds the counter must live
--
-- Returns {allowed, count}: {1, n} counted (n after counting), {0, n} refused (nothing written).

local count = tonumber(redis.call('GET', KEYS[1]) or '0')
if count >= tonumber(ARGV[1]) then
  return {0, count}
end
count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
return {1, count}
