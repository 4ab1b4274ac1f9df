-- log_size: tell this Redis the log's tree has reached a size. The size kept only grows (an
-- integrator that paused tells an older one); a restore may take it back, and the next
-- integrator's pass tells it again.
-- KEYS[1] the log's size (integer)
-- ARGV[1] the size the tree has reached
-- Returns the size kept.
local kept = tonumber(redis.call('GET', KEYS[1]) or '-1')
local size = tonumber(ARGV[1])
if size > kept then
  redis.call('SET', KEYS[1], ARGV[1])
  return size
end
return kept
