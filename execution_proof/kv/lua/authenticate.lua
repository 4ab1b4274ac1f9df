-- authenticate: the API-key lookup, the address's failed-auth throttle and its request
-- counter in one call (a plain Redis only: the key record and the address's counters live in
-- different Cluster slots, where KeyStore.authenticate makes the same checks in two round
-- trips and answers the same codes).
--
-- KEYS[1] the API-key record (hash: project_id, actor_id, plan, revoked, created_at, suspended_until)
-- KEYS[2] the address's failed-authentication counter for this minute window
-- KEYS[3] the address's counter of the request's scope for this minute window
-- ARGV[1] the failed-authentication allowance: at or above it the address is throttled
-- ARGV[2] the scope's per-minute limit
-- ARGV[3] seconds the scope counter must live
-- ARGV[4] "1": count the request if the key may be used; "0": never count (the request
--         will be refused for its body)
--
-- Returns {code, n, project_id, actor_id, plan, revoked, created_at, suspended_until}:
--   {1, failed}             the address is throttled (nothing read or written; no fields)
--   {2, failed}             the key is unknown or revoked (nothing written; no fields)
--   {0, count, fields...}   counted: the scope counter after this request
--   {3, count, fields...}   the scope's limit is used up: refused, nothing written
--   {4, 0, fields...}       usable key, not counted: ARGV[4] was "0", or the key's project
--                           has a suspension set (the caller decides whether it
--                           is in force and counts by itself if not)

local failed = tonumber(redis.call('GET', KEYS[2]) or '0')
if failed >= tonumber(ARGV[1]) then
  return {1, failed}
end
local fields = redis.call('HMGET', KEYS[1], 'project_id', 'actor_id', 'plan', 'revoked', 'created_at', 'suspended_until')
local known = false
for i = 1, 6 do
  if fields[i] then
    known = true
  end
end
if not known or fields[4] == '1' then
  return {2, failed}
end

local function reply(code, n)
  local out = {code, n}
  for i = 1, 6 do
    out[i + 2] = fields[i] or ''
  end
  return out
end

if ARGV[4] ~= '1' or (fields[6] and fields[6] ~= '') then
  return reply(4, 0)
end
local count = tonumber(redis.call('GET', KEYS[3]) or '0')
if count >= tonumber(ARGV[2]) then
  return reply(3, count)
end
count = redis.call('INCR', KEYS[3])
if count == 1 then
  redis.call('EXPIRE', KEYS[3], ARGV[3])
end
return reply(0, count)
