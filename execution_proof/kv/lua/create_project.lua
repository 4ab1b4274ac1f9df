-- create_project: create a project record and its first API key's membership, once.
--
-- KEYS[1] project record (hash)
-- KEYS[2] the project's API-key set
-- ARGV[1] project name
-- ARGV[2] created_at
-- ARGV[3] API-key hash (sha256:<hex>) to add to the set
--
-- Returns 1 when created, 0 when the project already existed (nothing written).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'name', ARGV[1], 'created_at', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1
