-- issue_receipt: record one new receipt atomically, or say why not. All or nothing.
--
-- KEYS[1] project record (hash; field "tip" = main chain tip, absent when there is none)
-- KEYS[2] idempotency record (string "<receipt_id> <fingerprint>")
-- KEYS[3] receipt record (string: the receipt's JSON bytes)
-- KEYS[4] receipt-hash index (string: receipt_id)
-- ARGV[1] the tip the receipt was built on ("" = the project had no tip)
-- ARGV[2] receipt JSON bytes
-- ARGV[3] receipt_id
-- ARGV[4] receipt_hash
-- ARGV[5] "1" when the receipt is on main (the tip advances to ARGV[4]), "0" for a branch
-- ARGV[6] idempotency fingerprint (hex SHA-256 of the logical input)
--
-- Returns {code, value}:
--   {0, ""}           issued: receipt, index, idempotency record and tip written
--   {1, receipt_id}   replay: the same logical input was already issued as receipt_id
--   {2, ""}           the idempotency key was used before with a different request
--   {3, tip}          the tip moved (value "" = none): rebuild on it and call again
--   {4, ""}           the project does not exist
-- Nothing is written unless the code is 0.

local idem = redis.call('GET', KEYS[2])
if idem then
  local sep = string.find(idem, ' ', 1, true)
  if string.sub(idem, sep + 1) ~= ARGV[6] then
    return {2, ''}
  end
  return {1, string.sub(idem, 1, sep - 1)}
end

if redis.call('EXISTS', KEYS[1]) == 0 then
  return {4, ''}
end

local tip = redis.call('HGET', KEYS[1], 'tip') or ''
if tip ~= ARGV[1] then
  return {3, tip}
end

redis.call('SET', KEYS[3], ARGV[2])
redis.call('SET', KEYS[4], ARGV[3])
redis.call('SET', KEYS[2], ARGV[3] .. ' ' .. ARGV[6])
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'tip', ARGV[4])
end
return {0, ''}
