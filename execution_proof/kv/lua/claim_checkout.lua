-- claim_checkout: turn a claimable checkout session into a project, actor and key. All or nothing.
--
-- KEYS[1] the checkout record cs:{TAG}:<ref> (hash: plan, created_ms, state, ...)
-- KEYS[2] the pre-assigned project's record (hash)
-- KEYS[3] the project's API-key set
-- ARGV[1] now, Unix milliseconds
-- ARGV[2] the claim window in milliseconds (counted from the checkout's created_ms)
-- ARGV[3] project name
-- ARGV[4] created_at of the project (YYYY-MM-DDTHH:MM:SS.mmmZ)
-- ARGV[5] the new API key's hash (sha256:<hex>); its key record was written beforehand
-- ARGV[6] the new actor id
-- ARGV[7] the project id (kept on the session record for operators)
--
-- Returns a code; codes 1-3 write nothing:
--   0  claimed: project record, key-set entry, session state "claimed" with claimed_at,
--      actor_id, key_hash and project_id
--   1  the session is not indexed yet (no record)
--   2  the session was already claimed (or its project already exists)
--   3  the claim window has passed

if redis.call('EXISTS', KEYS[1]) == 0 then
  return 1
end
if redis.call('HGET', KEYS[1], 'state') == 'claimed' or redis.call('EXISTS', KEYS[2]) == 1 then
  return 2
end
local created = tonumber(redis.call('HGET', KEYS[1], 'created_ms') or '0')
if created + tonumber(ARGV[2]) < tonumber(ARGV[1]) then
  return 3
end
redis.call('HSET', KEYS[2], 'name', ARGV[3], 'created_at', ARGV[4])
redis.call('SADD', KEYS[3], ARGV[5])
redis.call('HSET', KEYS[1], 'state', 'claimed', 'claimed_at', ARGV[1], 'actor_id', ARGV[6],
  'key_hash', ARGV[5], 'project_id', ARGV[7])
return 0
