-- log_ack: entries of one queue are in the log below a tree size: take them off the queue,
-- record each receipt's index and move the queue's synced size to that tree size, at once,
-- if the synced size is still the one the caller started from (jobs/log_sync.py states the
-- invariant this keeps). Runs after index_buckets.lua (its idx_* functions).
--
-- KEYS[1] the queue (list)
-- KEYS[2] the queue's synced size (integer; absent = 0)
-- KEYS[3] the project's index meta hash (the receipts' hash-index fields live in its
--         buckets); KEYS[1] again for the log's own queue, whose entries are no receipts
-- KEYS[4] the log's count of entries waiting (on a plain Redis; on a Cluster, where it lives
--         in another slot, KEYS[1] again and ARGV[1] is "0": the caller counts)
-- ARGV[1] "1": lower KEYS[4] by the entries taken off the queue
-- ARGV[2] the log's tag (4 bytes, kv.keys.LogIdentity)
-- ARGV[3] the synced size the caller started from
-- ARGV[4] the tree size the entries are below: the synced size it moves to
-- then 4 ARGV per entry, in queue order: the entry's bytes, its receipt id (16 bytes; "" for
-- an entry that is no receipt's), its hash-index field ("" likewise), its index in the log
-- (8 bytes, big-endian)
--
-- An entry leaves the queue from its head (the usual case) or, after a restore from an older
-- snapshot, from wherever it is. A receipt whose hash-index field names it and this log (the
-- receipt id, then this log's tag: it was queued for this log) gets its index appended; a
-- receipt that is gone (expired, deleted), or was issued for another log, gets nothing.
-- Returns {code, value}:
--   {0, taken}  done: `taken` entries left the queue
--   {1, size}   the synced size is `size`, not ARGV[3]: nothing written. ARGV[4] is a repeat;
--               less, a restore put the queue back (the caller catches it up from `size`);
--               more, the caller's tree is older than the one another integrator synced
local synced = tonumber(redis.call('GET', KEYS[2]) or '0')
if synced ~= tonumber(ARGV[3]) then
  return {1, synced}
end
local taken = 0
local tag = ARGV[2]
for at = 5, #ARGV, 4 do
  local entry, id, field, index = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  if redis.call('LINDEX', KEYS[1], 0) == entry then
    redis.call('LPOP', KEYS[1])
    taken = taken + 1
  else
    taken = taken + redis.call('LREM', KEYS[1], 1, entry)
  end
  if field ~= '' then
    local named = idx_get(KEYS[3], field)
    if named and string.sub(named, 1, 20) == id .. tag then
      idx_put(KEYS[3], field, id .. tag .. index)
    end
  end
end
idx_save()
redis.call('SET', KEYS[2], ARGV[4])
if ARGV[1] == '1' and taken > 0 then
  redis.call('DECRBY', KEYS[4], taken)
end
return {0, taken}
