-- find_receipt: a project's receipt by its hash, in one call: the hash-index field, then the
-- record it names (index_buckets.lua's idx_record: the record shares the index's slot).
-- Runs after index_buckets.lua (its idx_* functions).
--
-- KEYS[1] the project's index meta hash
-- ARGV[1] the hash-index field (kv.keys.hash_index_field)
--
-- Returns false when the field is absent, else {receipt id (16 bytes), the record or false}.
-- Fields hold truncated hashes: the caller checks the full hash on the receipt it reads.

local value = idx_get(KEYS[1], ARGV[1])
if not value then
  return false
end
return {string.sub(value, 1, 16), idx_record(KEYS[1], value)}
