-- log_lock: take, keep or give up the integrator's lock.
-- KEYS[1] the lock
-- ARGV[1] this integrator's token, ARGV[2] "take" | "keep" | "drop",
-- ARGV[3] milliseconds it holds
-- Returns 1 when this integrator holds the lock afterwards (0 for "drop").
local holder = redis.call('GET', KEYS[1])
if ARGV[2] == 'drop' then
  if holder == ARGV[1] then
    redis.call('DEL', KEYS[1])
  end
  return 0
end
if holder == ARGV[1] or (holder == false and ARGV[2] == 'take') then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
  return 1
end
return 0
