-- issue_receipt: record a group of new receipts of one project atomically, in order, or say
-- why not (group commit: the receipts of one batch were chained on each other in memory).
--
-- The call holds N receipts: KEYS has 8 per receipt and ARGV 13 per receipt, receipt i
-- (from 0) at KEYS[8i+1..8i+8] and ARGV[13i+1..13i+13], each laid out as below. They are
-- processed in order; the first that is not issued (code 1-6) ends the call: the receipts
-- after it were built on it and are not looked at (the caller rebuilds and sends them
-- again). N = 1 is the single receipt of the original script, with the same reply.
--
-- KEYS[1] project record (hash; field "tip" = main chain tip, absent when there is none)
-- KEYS[2] idempotency record (string "<receipt_id> <fingerprint>")
-- KEYS[3] receipt record (string: the receipt's JSON bytes)
-- KEYS[4] receipt-hash index (string: receipt_id)
-- KEYS[5] the API key's request counter for the current minute window
-- KEYS[6] the project's receipt counter for the current calendar month
-- KEYS[7] search index of the receipt's input_hash (sorted set: receipt_id scored by created ms)
-- KEYS[8] search index of the receipt's output_hash (KEYS[7] again when there is none)
-- ARGV[1] the tip the receipt was built on ("" = the project had no tip)
-- ARGV[2] receipt JSON bytes
-- ARGV[3] receipt_id
-- ARGV[4] receipt_hash
-- ARGV[5] "1" when the receipt is on main (the tip advances to ARGV[4]), "0" for a branch
-- ARGV[6] idempotency fingerprint (hex SHA-256 of the logical input)
-- ARGV[7] per-minute limit of the key's plan
-- ARGV[8] seconds the minute counter must live
-- ARGV[9] monthly receipt quota of the plan
-- ARGV[10] seconds the month counter must live
-- ARGV[11] a receipt id known to be gone ("" = none): an idempotency record naming it is
--          stale (its receipt was deleted) and may be taken over by this receipt
-- ARGV[12] the receipt's creation time (Unix ms): its score in the search indexes
-- ARGV[13] which search indexes to write: "io" both, "i" input only, "" none
--
-- Returns {code, value, minute_used, month_used} per receipt looked at, flattened (the
-- counters after that receipt):
--   {0, ""}           issued: receipt, indexes, idempotency record, tip and both counters written
--   {1, receipt_id}   replay of the same logical input: only the minute counter counts it
--   {2, ""}           the idempotency key was used before with a different request
--   {3, tip}          the tip moved (value "" = none): rebuild on it and call again
--   {4, ""}           the project does not exist
--   {5, ""}           the key's per-minute limit is used up
--   {6, ""}           the project's monthly quota is used up
-- Codes 2-6 write nothing for their receipt; code 1 writes only its minute counter.

local function issue_one(k, a)
  local minute = tonumber(redis.call('GET', KEYS[k + 5]) or '0')
  local month = tonumber(redis.call('GET', KEYS[k + 6]) or '0')
  if minute >= tonumber(ARGV[a + 7]) then
    return {5, '', minute, month}
  end

  local function count_minute()
    minute = redis.call('INCR', KEYS[k + 5])
    if minute == 1 then
      redis.call('EXPIRE', KEYS[k + 5], ARGV[a + 8])
    end
  end

  local idem = redis.call('GET', KEYS[k + 2])
  if idem then
    local sep = string.find(idem, ' ', 1, true)
    local named = string.sub(idem, 1, sep - 1)
    if string.sub(idem, sep + 1) ~= ARGV[a + 6] then
      return {2, '', minute, month}
    end
    if named ~= ARGV[a + 11] then
      count_minute()
      return {1, named, minute, month}
    end
  end

  if redis.call('EXISTS', KEYS[k + 1]) == 0 then
    return {4, '', minute, month}
  end

  if month >= tonumber(ARGV[a + 9]) then
    return {6, '', minute, month}
  end

  local tip = redis.call('HGET', KEYS[k + 1], 'tip') or ''
  if tip ~= ARGV[a + 1] then
    return {3, tip, minute, month}
  end

  redis.call('SET', KEYS[k + 3], ARGV[a + 2])
  redis.call('SET', KEYS[k + 4], ARGV[a + 3])
  redis.call('SET', KEYS[k + 2], ARGV[a + 3] .. ' ' .. ARGV[a + 6])
  if string.find(ARGV[a + 13], 'i', 1, true) then
    redis.call('ZADD', KEYS[k + 7], ARGV[a + 12], ARGV[a + 3])
  end
  if string.find(ARGV[a + 13], 'o', 1, true) then
    redis.call('ZADD', KEYS[k + 8], ARGV[a + 12], ARGV[a + 3])
  end
  if ARGV[a + 5] == '1' then
    redis.call('HSET', KEYS[k + 1], 'tip', ARGV[a + 4])
  end
  count_minute()
  month = redis.call('INCR', KEYS[k + 6])
  if month == 1 then
    redis.call('EXPIRE', KEYS[k + 6], ARGV[a + 10])
  end
  return {0, '', minute, month}
end

local replies = {}
for i = 0, #KEYS / 8 - 1 do
  local reply = issue_one(8 * i, 13 * i)
  for _, value in ipairs(reply) do
    replies[#replies + 1] = value
  end
  if reply[1] ~= 0 then
    break
  end
end
return replies
