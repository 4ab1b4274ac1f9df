-- find_index_field: one field of a project's index.
-- Runs after index_buckets.lua (its idx_* functions).
--
-- KEYS[1] the project's index meta hash
-- ARGV[1] the field (kv.keys.hash_index_field, kv.keys.search_field)
--
-- Returns the field's value (a 16-byte receipt id; for a search field, several), else
-- false. Fields hold truncated hashes: the caller checks the full hash on the receipts it
-- reads.

return idx_get(KEYS[1], ARGV[1]) or false
