-- issue_receipt: record a group of new receipts of one project atomically, in order, or say
-- why not (group commit: the receipts of one batch were chained on each other in memory).
-- Runs after index_buckets.lua (its idx_* functions).
--
-- The call holds N receipts: KEYS has 11 per receipt and ARGV 20 per receipt, receipt i
-- (from 0) at KEYS[11i+1..11i+11] and ARGV[20i+1..20i+20], each laid out as below. They are
-- processed in order; the first that is not issued (code 1-6) ends the call: the receipts
-- after it were built on it and are not looked at (the caller rebuilds and sends them
-- again). N = 1 is a single receipt, with the same reply.
--
-- KEYS[1] project record (hash; field "tip" = main chain tip, absent when there is none)
-- KEYS[2] receipt record (string: compact record or JSON bytes)
-- KEYS[3] the project's index meta hash (its buckets: KEYS[3] .. ':' .. number)
-- KEYS[4] the API key's request counter for the current minute window
-- KEYS[5] the project's receipt counter for the current calendar month
-- KEYS[6] the search set of the receipt's input_hash (sorted set: 16-byte receipt ids
--         scored by created ms, once a hash has more than four receipts)
-- KEYS[7] the search set of its output_hash (KEYS[6] again when there is none)
-- KEYS[8] the project's log queue (list of entries waiting for the integrator)
-- KEYS[9] the log's count of entries waiting (on a plain Redis; on a Cluster, where it lives
--         in another slot, KEYS[8] again: see ARGV[18])
-- KEYS[10] the queue's synced size (jobs/log_sync.py: no entry of the tree below it is in
--          the queue)
-- KEYS[11] the log's size as an integrator last told this Redis (on a plain Redis; on a
--          Cluster, KEYS[8] again: see ARGV[20])
-- ARGV[1] the tip the receipt was built on ("" = the project had no tip)
-- ARGV[2] the receipt's stored value (compact record, or JSON)
-- ARGV[3] receipt_hash
-- ARGV[4] "1" when the receipt is on main (the tip advances to ARGV[3]), "0" for a branch
-- ARGV[5] per-minute limit of the key's plan
-- ARGV[6] seconds the minute counter must live
-- ARGV[7] monthly receipt quota of the plan
-- ARGV[8] seconds the month counter must live
-- ARGV[9] a receipt id known to be gone, as 16 bytes ("" = none): an idempotency record
--         naming it is stale (its receipt was deleted) and may be taken over by this receipt
-- ARGV[10] receipt_id as 16 bytes
-- ARGV[11] hash-index field (value: ARGV[10] .. ARGV[19])
-- ARGV[12] idempotency field (value: ARGV[10] .. ARGV[13])
-- ARGV[13] the idempotency fingerprint's first 8 bytes (kv.keys.fingerprint_tail)
-- ARGV[14] input_hash search field ("" = none): ARGV[10] is appended to its value, or,
--          when the hash's set KEYS[6] exists or the value already holds four ids (64
--          bytes, listpack's limit), added to the set, the value's ids moving there too
-- ARGV[15] output_hash search field ("" = the receipt has no output_hash), with KEYS[7]
-- ARGV[16] the receipt's log entry ("" = the service runs without a log): appended to
--          KEYS[8] with the receipt, so the log sees the project's receipts in chain order
-- ARGV[17] LOG_MAX_PENDING ("0" = no limit): a receipt whose entry would make more than
--          this many wait is not issued (code 7), after the minute limit and the replay
--          check and before the quota
-- ARGV[18] "" = KEYS[9] is the count: read it, and count the entry in it; else the count
--          as the caller read it (a Cluster: approximate, and the caller counts the entry)
-- ARGV[19] the tag of the log ARGV[16] is queued for (4 bytes, kv.keys.LogIdentity; "" =
--          no log): the hash-index value names it, so the receipt is known to be in that log
--          only (the integrator appends its index there)
-- ARGV[20] "" = read the log's size from KEYS[11]; else the log's size as the caller read it
--          ("0" when none). An entry that starts an empty queue cannot be in the tree below
--          it: the queue's synced size rises to it (never falls), so a queue that waited empty
--          while the log grew is in line with the tree again without reading it back
-- A search set scores each id by its creation time (Unix ms), read from the id's first
-- six bytes.
--
-- Returns {code, value, minute_used, month_used} per receipt looked at, flattened (the
-- counters after that receipt):
--   {0, ""}           issued: receipt, index fields, tip and both counters written
--   {1, receipt_id}   replay of the same logical input: only the minute counter counts it
--                     (receipt_id: 16 bytes, from the index)
--   {2, ""}           the idempotency key was used before with a different request
--   {3, tip}          the tip moved (value "" = none): rebuild on it and call again
--   {4, ""}           the project does not exist
--   {5, ""}           the key's per-minute limit is used up
--   {6, ""}           the project's monthly quota is used up
--   {7, ""}           LOG_MAX_PENDING entries wait for the log already
-- Codes 2-7 write nothing for their receipt; code 1 writes only its minute counter (a replay
-- adds no log entry).

-- The ids a search field hands to its hash's set: the field's own (it goes) and `id`.
local function moving_ids(meta, field, id)
  local ids = {}
  local value = idx_take(meta, field) or ''
  for at = 1, #value, 16 do
    ids[#ids + 1] = string.sub(value, at, at + 15)
  end
  ids[#ids + 1] = id
  return ids
end

local pending = nil

local function issue_one(k, a)
  local minute = tonumber(redis.call('GET', KEYS[k + 4]) or '0')
  local month = tonumber(redis.call('GET', KEYS[k + 5]) or '0')
  if minute >= tonumber(ARGV[a + 5]) then
    return {5, '', minute, month}
  end

  local function count_minute()
    minute = redis.call('INCR', KEYS[k + 4])
    if minute == 1 then
      redis.call('EXPIRE', KEYS[k + 4], ARGV[a + 6])
    end
  end

  local entry = idx_get(KEYS[k + 3], ARGV[a + 12])
  if entry then
    if string.sub(entry, 17) ~= ARGV[a + 13] then
      return {2, '', minute, month}
    end
    local named = string.sub(entry, 1, 16)
    if named ~= ARGV[a + 9] then
      count_minute()
      return {1, named, minute, month}
    end
  end

  if redis.call('EXISTS', KEYS[k + 1]) == 0 then
    return {4, '', minute, month}
  end

  local counted = ARGV[a + 16] ~= '' and ARGV[a + 18] == ''
  if ARGV[a + 16] ~= '' and ARGV[a + 17] ~= '0' then
    if pending == nil then
      pending = tonumber(counted and (redis.call('GET', KEYS[k + 9]) or '0') or ARGV[a + 18])
    end
    if pending >= tonumber(ARGV[a + 17]) then
      return {7, '', minute, month}
    end
  end

  if month >= tonumber(ARGV[a + 7]) then
    return {6, '', minute, month}
  end

  local tip = redis.call('HGET', KEYS[k + 1], 'tip') or ''
  if tip ~= ARGV[a + 1] then
    return {3, tip, minute, month}
  end

  local id = ARGV[a + 10]
  redis.call('SET', KEYS[k + 2], ARGV[a + 2])
  idx_put(KEYS[k + 3], ARGV[a + 11], id .. ARGV[a + 19])
  idx_put(KEYS[k + 3], ARGV[a + 12], id .. ARGV[a + 13])
  -- A search field takes the id while it holds fewer than four; else the ids go to the set.
  if ARGV[a + 14] ~= '' and (redis.call('EXISTS', KEYS[k + 6]) == 1
      or not idx_append(KEYS[k + 3], ARGV[a + 14], id, 64)) then
    for _, one in ipairs(moving_ids(KEYS[k + 3], ARGV[a + 14], id)) do
      redis.call('ZADD', KEYS[k + 6], string.format('%d', idx_id_ms(one)), one)
    end
  end
  if ARGV[a + 15] ~= '' and (redis.call('EXISTS', KEYS[k + 7]) == 1
      or not idx_append(KEYS[k + 3], ARGV[a + 15], id, 64)) then
    for _, one in ipairs(moving_ids(KEYS[k + 3], ARGV[a + 15], id)) do
      redis.call('ZADD', KEYS[k + 7], string.format('%d', idx_id_ms(one)), one)
    end
  end
  idx_grow()
  if ARGV[a + 4] == '1' then
    redis.call('HSET', KEYS[k + 1], 'tip', ARGV[a + 3])
  end
  if ARGV[a + 16] ~= '' then
    if redis.call('RPUSH', KEYS[k + 8], ARGV[a + 16]) == 1 then
      local size = tonumber(ARGV[a + 20] == '' and (redis.call('GET', KEYS[k + 11]) or '0') or ARGV[a + 20])
      if size > tonumber(redis.call('GET', KEYS[k + 10]) or '0') then
        redis.call('SET', KEYS[k + 10], size)
      end
    end
    if counted then
      redis.call('INCR', KEYS[k + 9])
    end
    if pending ~= nil then
      pending = pending + 1
    end
  end
  count_minute()
  month = redis.call('INCR', KEYS[k + 5])
  if month == 1 then
    redis.call('EXPIRE', KEYS[k + 5], ARGV[a + 8])
  end
  return {0, '', minute, month}
end

local replies = {}
for i = 0, #KEYS / 11 - 1 do
  local reply = issue_one(11 * i, 20 * i)
  for _, value in ipairs(reply) do
    replies[#replies + 1] = value
  end
  if reply[1] ~= 0 then
    break
  end
end
idx_save()
return replies
