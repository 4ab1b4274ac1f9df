-- index_buckets: shared functions, put in front of each script that reads or writes a
-- project's index (kv/store.py does the joining). Not a script of its own.
--
-- A project's index entries are fields of its bucket hashes (kv/keys.py, docs/redis.md).
-- The buckets grow by linear hashing: the meta hash (index_meta_key) holds level, split and
-- count; there are 2^level + split buckets, and a field's bucket comes from its bytes 2-4
-- (the first three bytes of the SHA-256 value it is keyed by). The meta key is declared in
-- KEYS; each bucket's name is the meta key's name + ":" + its number, so it carries the
-- same {TAG} and lives in the same Redis Cluster slot. The record of a receipt an index
-- field names is reached the same way (idx_record): a receipt id carries its project's
-- {TAG} (receipts/ids.py), so its record key (kv.keys.receipt_key) is made from the meta
-- key's {TAG} and the id, in the same slot.

local INDEX_LOAD = 48 -- fields per bucket on average before the next split (kv.keys.INDEX_LOAD)
local idx = {}

local function idx_load(meta)
  if idx.meta ~= meta then
    local v = redis.call('HMGET', meta, 'level', 'split', 'count')
    idx = {meta = meta, level = tonumber(v[1] or '0'), split = tonumber(v[2] or '0'),
           count = tonumber(v[3] or '0'), dirty = false}
  end
end

local function idx_hash(field)
  local b1, b2, b3 = string.byte(field, 2, 4)
  return (b1 * 256 + b2) * 256 + b3
end

local function idx_bucket(field)
  local h = idx_hash(field)
  local m = 2 ^ idx.level
  local b = h % m
  if b < idx.split then
    b = h % (2 * m)
  end
  return idx.meta .. ':' .. string.format('%d', b)
end

local function idx_get(meta, field)
  idx_load(meta)
  local bucket = idx_bucket(field)
  return redis.call('HGET', bucket, field)
end

local CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ'

-- The ULID text of 16 bytes: 26 base-32 digits of the 128 bits after two zero bits
-- (receipts.ids.ulid_from_bytes).
local function idx_ulid_text(raw)
  local digits = {}
  local acc, bits = 0, 2
  for i = 1, 16 do
    acc = acc * 256 + string.byte(raw, i)
    bits = bits + 8
    while bits >= 5 do
      bits = bits - 5
      local digit = math.floor(acc / 2 ^ bits)
      acc = acc - digit * 2 ^ bits
      digits[#digits + 1] = string.sub(CROCKFORD, digit + 1, digit + 1)
    end
  end
  return table.concat(digits)
end

-- The record of the receipt whose 16-byte id an index value of `meta` starts with, or false.
local function idx_record(meta, value)
  local tag = string.match(meta, '^b:({[^}]*}):')
  return redis.call('GET', 'r:' .. tag .. ':rcpt_' .. idx_ulid_text(string.sub(value, 1, 16))) or false
end

local function idx_count(delta)
  if delta ~= 0 then
    idx.count = idx.count + delta
    idx.dirty = true
  end
end

local function idx_put(meta, field, value)
  idx_load(meta)
  local bucket = idx_bucket(field)
  idx_count(redis.call('HSET', bucket, field, value))
end

-- Append `value` to a field's value (a search field's list of ids), unless the result would
-- be longer than `max` bytes (listpack holds values up to 64): then write nothing and return
-- false.
local function idx_append(meta, field, value, max)
  idx_load(meta)
  local bucket = idx_bucket(field)
  local old = redis.call('HGET', bucket, field)
  if old then
    if #old + #value > max then
      return false
    end
    redis.call('HSET', bucket, field, old .. value)
  else
    idx_count(redis.call('HSET', bucket, field, value))
  end
  return true
end

-- Remove a field and return its value (false when absent).
local function idx_take(meta, field)
  idx_load(meta)
  local bucket = idx_bucket(field)
  local value = redis.call('HGET', bucket, field)
  if value then
    redis.call('HDEL', bucket, field)
    idx_count(-1)
  end
  return value
end

-- The creation time (Unix ms) of a 16-byte receipt id: its first six bytes.
local function idx_id_ms(id)
  local b1, b2, b3, b4, b5, b6 = string.byte(id, 1, 6)
  return ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6
end

-- Split bucket number `split` into itself and `split + 2^level`, until the load is back
-- under INDEX_LOAD. Each split moves about half of one bucket's fields.
local function idx_grow()
  while idx.count > INDEX_LOAD * (2 ^ idx.level + idx.split) do
    local m = 2 ^ idx.level
    local from = idx.meta .. ':' .. string.format('%d', idx.split)
    local to = idx.meta .. ':' .. string.format('%d', idx.split + m)
    local entries = redis.call('HGETALL', from)
    for i = 1, #entries, 2 do
      if idx_hash(entries[i]) % (2 * m) ~= idx.split then
        redis.call('HSET', to, entries[i], entries[i + 1])
        redis.call('HDEL', from, entries[i])
      end
    end
    idx.split = idx.split + 1
    if idx.split == m then
      idx.level = idx.level + 1
      idx.split = 0
    end
    idx.dirty = true
  end
end

local function idx_save()
  if idx.dirty then
    redis.call('HSET', idx.meta, 'level', string.format('%d', idx.level), 'split',
      string.format('%d', idx.split), 'count', string.format('%d', idx.count))
    idx.dirty = false
  end
end

-- Remove the 16-byte receipt id `id` from a field: the field goes when its value is `id`
-- (hash index) or holds only `id` (search); otherwise `id` leaves the list. Returns 1 when
-- the field named `id`, else 0.
local function idx_remove(meta, field, id)
  idx_load(meta)
  local bucket = idx_bucket(field)
  local value = redis.call('HGET', bucket, field)
  if not value then
    return 0
  end
  for at = 1, #value, 16 do
    if string.sub(value, at, at + 15) == id then
      local left = string.sub(value, 1, at - 1) .. string.sub(value, at + 16)
      if left == '' then
        redis.call('HDEL', bucket, field)
        idx_count(-1)
      else
        redis.call('HSET', bucket, field, left)
      end
      return 1
    end
  end
  return 0
end

