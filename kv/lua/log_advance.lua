-- log_advance: move a reserved batch to its next phase.
-- KEYS[1] the log's state (hash)
-- ARGV[1] the batch's new size (it must be the reserved one)
-- ARGV[2] the phase it must be in: "tiles" (tiles and bundles written: ARGV[3] is the signed
--         checkpoint, published now; the phase becomes "ack") or "ack" (every project's
--         queue acknowledged: the batch is done, the phase becomes "")
-- Returns 1 when advanced, 0 when the state is not in that phase at that size.
local state = redis.call('HMGET', KEYS[1], 'size', 'phase')
if state[1] ~= ARGV[1] or state[2] ~= ARGV[2] then
  return 0
end
if ARGV[2] == 'tiles' then
  redis.call('HSET', KEYS[1], 'checkpoint', ARGV[3], 'phase', 'ack')
else
  redis.call('HSET', KEYS[1], 'phase', '')
  redis.call('HDEL', KEYS[1], 'batch')
end
return 1
