-- Acquire a lease and issue a token in one step. KEYS: lease, sequence, state (for the floor).
-- ARGV: owner, ttl ms.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return { 'corrupt', 'lease key ' .. KEYS[1] .. ' holds a ' .. kind }
end
local holder = field(redis.call('HGET', KEYS[1], 'owner'))
if holder and holder ~= ARGV[1] then return { 'held', holder } end
local token, refusal = next_token(KEYS[2], KEYS[3])
if not token then return refusal end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return { 'ok', token }
