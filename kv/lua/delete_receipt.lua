-- delete_receipt: remove one receipt, its hash-index entry and its search-index entries together.
--
-- KEYS[1] receipt record (string: the receipt's JSON bytes)
-- KEYS[2] receipt-hash index entry (string: receipt_id)
-- KEYS[3] search index of the receipt's input_hash (sorted set of receipt ids)
-- KEYS[4] search index of the receipt's output_hash (KEYS[3] again when it has none)
-- ARGV[1] receipt_id the index entry must name to be removed
--
-- Returns the number of keys removed (0, 1 or 2: the receipt and its hash-index entry; the
-- search-index members are removed too but not counted). The index entry is removed only
-- when it still names this receipt. Running it twice removes nothing the second time.

local removed = redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then
  removed = removed + redis.call('DEL', KEYS[2])
end
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
return removed
