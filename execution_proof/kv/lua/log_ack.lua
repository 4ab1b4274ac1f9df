-- log_ack: entries of one project are in the log: take them off its queue and record each
-- receipt's index. Runs after index_buckets.lua (its idx_* functions).
--
-- KEYS[1] the project's log queue (list)
-- KEYS[2] the project's index meta hash (the receipts' hash-index fields live in its buckets)
-- KEYS[3] the log's count of entries waiting (on a plain Redis; on a Cluster, where it lives
--         in another slot, KEYS[1] again and ARGV[1] is "0": the caller counts)
-- ARGV[1] "1": lower KEYS[3] by the entries taken off the queue
-- ARGV[2] the log's tag (4 bytes, kv.keys.LogIdentity)
-- then 4 ARGV per entry, in queue order: the entry's bytes, its receipt id (16 bytes), its
-- hash-index field, its index in the log (8 bytes, big-endian)
--
-- An entry leaves the queue from its head (the usual case) or, after a restore from an older
-- snapshot, from wherever it is. A receipt whose hash-index field names it and this log (the
-- receipt id, then this log's tag: it was queued for this log) gets its index appended; a
-- receipt that is gone (expired, deleted), or was issued for another log, gets nothing.
-- Idempotent: a second call finds the entries gone and writes the same indices again.
-- Returns the number of entries taken off the queue.
local taken = 0
local tag = ARGV[2]
for at = 3, #ARGV, 4 do
  local entry, id, field, index = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 3]
  if redis.call('LINDEX', KEYS[1], 0) == entry then
    redis.call('LPOP', KEYS[1])
    taken = taken + 1
  else
    taken = taken + redis.call('LREM', KEYS[1], 1, entry)
  end
  local named = idx_get(KEYS[2], field)
  if named and string.sub(named, 1, 20) == id .. tag then
    idx_put(KEYS[2], field, id .. tag .. index)
  end
end
idx_save()
if ARGV[1] == '1' and taken > 0 then
  redis.call('DECRBY', KEYS[3], taken)
end
return taken
