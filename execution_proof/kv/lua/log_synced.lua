-- log_synced: record that every entry of the tree up to a size has left its queue and has
-- its index recorded, if the synced size is still the one the caller started from. A Redis
-- restored from an older snapshot meanwhile holds an older one: then nothing moves, and the
-- integrator reconciles from there (jobs/log_integrator.py) instead of skipping past
-- entries it has not taken off their queues.
-- KEYS[1] the log's synced size (integer)
-- ARGV[1] the size the caller started from ("" = none recorded), ARGV[2] the new size
-- Returns 1 when it moved, 0 when the synced size was another.
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
return 1
