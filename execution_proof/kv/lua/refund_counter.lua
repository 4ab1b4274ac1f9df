-- refund_counter: take back one request counted in a fixed-window counter, for a request
-- that was counted before it could be refused (its body is read only after authentication).
--
-- KEYS[1] the counter for one window (string integer; expires after the window)
--
-- Returns the counter after the refund. A counter taken back to 0 is deleted, so a refused
-- request leaves the store as it found it; one that expired meanwhile stays gone (never
-- brought back as a negative number without a lifetime).

local count = tonumber(redis.call('GET', KEYS[1]) or '0')
if count <= 1 then
  redis.call('DEL', KEYS[1])
  return 0
end
return redis.call('DECR', KEYS[1])
