-- log_reserve: claim the next batch of the log, if the tree is where the integrator read it.
-- KEYS[1] the log's state (hash)
-- ARGV[1] the size read, ARGV[2] the root read (32 bytes; "" for the empty tree)
-- ARGV[3] the new size, ARGV[4] the new root, ARGV[5] the batch's journal (JSON)
-- Returns 1 when reserved (phase "tiles"), 0 when the state moved or a batch is under way.
local state = redis.call('HMGET', KEYS[1], 'size', 'root', 'phase')
local size, root, phase = state[1] or '0', state[2] or '', state[3] or ''
if phase ~= '' or size ~= ARGV[1] or root ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'size', ARGV[3], 'root', ARGV[4], 'phase', 'tiles', 'batch', ARGV[5])
return 1
