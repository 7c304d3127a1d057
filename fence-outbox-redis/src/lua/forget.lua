-- Removes a domain from a partition index if its version is unchanged. KEYS: index.
-- ARGV: domain, version.
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return { 'ok', '1' }
end
return { 'ok', '0' }
