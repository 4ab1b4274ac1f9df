-- log_read: a queue's first entries and its synced size, read together: the synced size
-- says where in the tree its entries may already be (jobs/log_sync.py), and only holds for
-- the entries it was kept with.
-- KEYS[1] the queue (list)
-- KEYS[2] the queue's synced size (integer; absent = 0)
-- ARGV[1] how many entries, from the head (-1: all)
-- Returns {synced size, entry, entry, ...}
local limit = tonumber(ARGV[1])
local reply = redis.call('LRANGE', KEYS[1], 0, limit > 0 and limit - 1 or -1)
table.insert(reply, 1, tonumber(redis.call('GET', KEYS[2]) or '0'))
return reply
