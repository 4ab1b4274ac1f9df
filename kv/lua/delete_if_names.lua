-- delete_if_names: remove a hash-index entry or an idempotency record only while it still
-- names a given receipt (the retention sweep's compare-and-delete).
--
-- KEYS[1] a receipt-hash index entry (string: receipt_id) or an idempotency record
--         (string: "<receipt_id> <fingerprint>")
-- ARGV[1] the receipt_id the entry must name: the whole value, or the value's first word
--
-- Returns 1 when the entry was removed, 0 when it was absent or names another receipt.
-- Running it twice removes nothing the second time.

local value = redis.call('GET', KEYS[1])
if not value then
  return 0
end
if value == ARGV[1] or string.sub(value, 1, #ARGV[1] + 1) == ARGV[1] .. ' ' then
  return redis.call('DEL', KEYS[1])
end
return 0
