-- claim_schedule_owner: take the schedule-owner lock when free, or extend it when ours.
--
-- KEYS[1] the schedule-owner lock (string: the holder's token)
-- ARGV[1] this worker's token
-- ARGV[2] lock lifetime in milliseconds
--
-- Returns 1 when this worker holds the lock now, 0 when another worker holds it
-- (nothing written then).

local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
