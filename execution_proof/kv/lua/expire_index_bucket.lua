-- expire_index_bucket: the retention sweep's work on one index bucket, atomically.
--
-- KEYS[1] an index bucket (hash; kv.keys.index_bucket_key)
-- KEYS[2] its project's index meta hash (field "count" is lowered by the fields removed)
-- ARGV[1] the cutoff, Unix ms: entries naming a receipt created strictly before it go
--
-- Every value starts with a 16-byte receipt id (search values: several) whose first 6
-- bytes are its creation time in ms. A hash-index ("h") or idempotency ("i") field naming
-- an expired receipt is removed; a search field ("I", "O") loses its expired ids, and goes
-- when none is left. Anything else (a key of another type, a foreign field) is left alone.
-- Returns {hash-index fields, idempotency fields, search ids} removed. Safe to run twice
-- or concurrently: a second run finds nothing to remove.

if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then
  return {0, 0, 0}
end
local cutoff = tonumber(ARGV[1])

local function created_ms(id)
  local b1, b2, b3, b4, b5, b6 = string.byte(id, 1, 6)
  return ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6
end

local hashes, records, ids, fields = 0, 0, 0, 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local field, value = entries[i], entries[i + 1]
  local kind = string.sub(field, 1, 1)
  if (kind == 'h' or kind == 'i') and #value >= 16 and created_ms(value) < cutoff then
    redis.call('HDEL', KEYS[1], field)
    fields = fields + 1
    if kind == 'h' then hashes = hashes + 1 else records = records + 1 end
  elseif (kind == 'I' or kind == 'O') and #value % 16 == 0 then
    local kept = {}
    for at = 1, #value, 16 do
      local id = string.sub(value, at, at + 15)
      if created_ms(id) < cutoff then
        ids = ids + 1
      else
        kept[#kept + 1] = id
      end
    end
    if #kept == 0 then
      redis.call('HDEL', KEYS[1], field)
      fields = fields + 1
    elseif #kept * 16 < #value then
      redis.call('HSET', KEYS[1], field, table.concat(kept))
    end
  end
end
if fields > 0 then
  redis.call('HINCRBY', KEYS[2], 'count', -fields)
end
return {hashes, records, ids}
