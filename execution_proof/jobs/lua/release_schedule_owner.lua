-- release_schedule_owner: drop the schedule-owner lock, only while this worker holds it.
--
-- KEYS[1] the schedule-owner lock (string: the holder's token)
-- ARGV[1] this worker's token
--
-- Returns 1 released, 0 not ours (left alone).

if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
