-- log_ack: take a project's integrated entries off its queue and record their indices.
-- Idempotent: a second call for the same batch finds its last entry gone and does nothing.
-- KEYS[1] the project's log queue (list)
-- KEYS[2] the slot tag's index hash (receipt id -> index)
-- ARGV[1] how many entries of the queue's head the batch integrated
-- ARGV[2] the last of them (its bytes), ARGV[3] the index of the first
-- ARGV[4..] the receipt ids of the entries (16 bytes each), in queue order
-- Returns 1 when it took them, 0 when they were already taken.
local count = tonumber(ARGV[1])
if redis.call('LINDEX', KEYS[1], count - 1) ~= ARGV[2] then
  return 0
end
redis.call('LTRIM', KEYS[1], count, -1)
local first = tonumber(ARGV[3])
for i = 4, #ARGV do
  redis.call('HSET', KEYS[2], ARGV[i], string.format('%d', first + i - 4))
end
return 1
