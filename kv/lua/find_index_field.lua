-- find_index_field: one field of a project's index, with an old-layout fallback.
-- Runs after index_buckets.lua (its idx_* functions).
--
-- KEYS[1] the project's index meta hash
-- KEYS[2] optional: the old-layout string entry for the same thing (a hash-index entry
--         h:…, whose value is a receipt id), read when the field is absent
-- ARGV[1] the field (kv.keys.hash_index_field, kv.keys.search_field)
--
-- Returns the field's value (a 16-byte receipt id; for a search field, several), else the
-- old entry's value (a receipt id as text), else false. Fields hold truncated hashes: the
-- caller checks the full hash on the receipts it reads.

local value = idx_get(KEYS[1], ARGV[1])
if value then
  return value
end
if #KEYS > 1 then
  return redis.call('GET', KEYS[2])
end
return false
