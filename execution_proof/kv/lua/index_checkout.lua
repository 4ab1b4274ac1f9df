-- index_checkout: make a paid checkout session claimable, once (the background job).
--
-- KEYS[1] the checkout record cs:{TAG}:<ref>, in the slot of the project pre-assigned to the checkout (hash)
--         (<ref>: the checkout's reference, a hash of the session id; the id itself is never stored)
-- ARGV[1] plan ("basic" or "pro")
-- ARGV[2] the checkout's creation time, Unix milliseconds (the claim window starts here)
-- ARGV[3] indexing time, Unix milliseconds
--
-- Returns 1 when the record was written (state "claimable"), 0 when it already existed
-- (claimable or claimed: nothing is written, so running the job twice changes nothing).

if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'plan', ARGV[1], 'created_ms', ARGV[2], 'indexed_at', ARGV[3], 'state', 'claimable')
return 1
