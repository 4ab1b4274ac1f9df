-- delete_receipt: remove one receipt and its hash-index entry together.
--
-- KEYS[1] receipt record (string: the receipt's JSON bytes)
-- KEYS[2] receipt-hash index entry (string: receipt_id)
-- ARGV[1] receipt_id the index entry must name to be removed
--
-- Returns the number of keys removed (0, 1 or 2). The index entry is removed only when it
-- still names this receipt. Running it twice removes nothing the second time.

local removed = redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then
  removed = removed + redis.call('DEL', KEYS[2])
end
return removed
