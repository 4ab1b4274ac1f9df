-- delete_receipt: remove one receipt and every index entry naming it, together.
-- Runs after index_buckets.lua (its idx_* functions).
--
-- KEYS[1] receipt record (string)
-- KEYS[2] the project's index meta hash
-- KEYS[3] old-layout receipt-hash index entry (string: receipt_id)
-- KEYS[4] search set of the receipt's input_hash (sorted set of receipt ids: text from the
--         old layout, 16 bytes for a hash with more than four receipts)
-- KEYS[5] search set of its output_hash (KEYS[4] again when it has none)
-- ARGV[1] receipt_id
-- ARGV[2] receipt_id as 16 bytes
-- ARGV[3] hash-index field
-- ARGV[4] input_hash search field
-- ARGV[5] output_hash search field ("" = none)
--
-- Returns the number removed of: the receipt, its hash-index entry (new or old layout);
-- 0, 1 or 2. Search entries are removed too but not counted. An entry is removed only while
-- it still names this receipt. The idempotency record stays: it names a receipt that is
-- gone, so an identical create replaces it (kv/store.py) and the sweep dates it. Running it
-- twice removes nothing the second time.

local removed = redis.call('DEL', KEYS[1])
if idx_get(KEYS[2], ARGV[3]) == ARGV[2] then
  removed = removed + idx_remove(KEYS[2], ARGV[3], ARGV[2])
end
for _, field in ipairs({ARGV[4], ARGV[5]}) do
  if field ~= '' then
    idx_remove(KEYS[2], field, ARGV[2])
  end
end
idx_save()
if redis.call('GET', KEYS[3]) == ARGV[1] then
  removed = removed + redis.call('DEL', KEYS[3])
end
redis.call('ZREM', KEYS[4], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[5], ARGV[1], ARGV[2])
return removed
