-- Publish one document of the receipt-key registry (kv/store_signing_keys.py).
-- KEYS[1] the hash (roots, certificates or revocations)
-- KEYS[2] the registry's version
-- ARGV[1] the field (a kid), ARGV[2] the document, ARGV[3] "1": only when the field is new.
-- Returns 1 when written (the version moved), 0 when the field was there and left alone.
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return 1
