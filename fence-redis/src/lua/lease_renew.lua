-- Renew (ARGV[3] = ttl ms) or release (ARGV[3] = 'release') a lease held by this owner and token.
-- KEYS: lease. ARGV: owner, token, ttl ms or 'release'.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return { 'corrupt', 'lease key ' .. KEYS[1] .. ' holds a ' .. kind }
end
local held = redis.call('HMGET', KEYS[1], 'owner', 'token')
if field(held[1]) ~= ARGV[1] or field(held[2]) ~= ARGV[2] then return { 'lost' } end
if ARGV[3] == 'release' then
  redis.call('DEL', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return { 'ok' }
