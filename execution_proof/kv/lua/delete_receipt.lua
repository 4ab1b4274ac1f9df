-- delete_receipt: remove one receipt and every index entry naming it, together.
-- Runs after index_buckets.lua (its idx_* functions).
--
-- KEYS[1] receipt record (string)
-- KEYS[2] the project's index meta hash
-- KEYS[3] search set of the receipt's input_hash (sorted set of 16-byte receipt ids, for a
--         hash with more than four receipts)
-- KEYS[4] search set of its output_hash (KEYS[3] again when it has none)
-- ARGV[1] receipt_id as 16 bytes
-- ARGV[2] hash-index field
-- ARGV[3] input_hash search field ("" = none)
-- ARGV[4] output_hash search field ("" = none)
--
-- Returns the number removed of: the receipt, its hash-index field; 0, 1 or 2. Search
-- entries are removed too but not counted. An entry is removed only while it still names
-- this receipt. The idempotency record stays: it names a receipt that is gone, so an
-- identical create replaces it (kv/store_receipts.py) and the sweep dates it. Running it
-- twice removes nothing the second time.

local removed = redis.call('DEL', KEYS[1])
-- The hash-index value is the receipt id, then (once in the log) its 8-byte log index.
local named = idx_get(KEYS[2], ARGV[2])
if named and string.sub(named, 1, 16) == ARGV[1] then
  idx_take(KEYS[2], ARGV[2])
  removed = removed + 1
end
for _, field in ipairs({ARGV[3], ARGV[4]}) do
  if field ~= '' then
    idx_remove(KEYS[2], field, ARGV[1])
  end
end
idx_save()
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return removed
