-- Acquire a lease and issue a token in one step. KEYS: lease, sequence.
-- ARGV: owner, ttl ms.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
  return { 'corrupt', 'lease key ' .. KEYS[1] .. ' holds a ' .. kind }
end
local holder = field(redis.call('HGET', KEYS[1], 'owner'))
if holder and holder ~= ARGV[1] then return { 'held', holder } end
local seq_kind = redis.call('TYPE', KEYS[2])['ok']
if seq_kind ~= 'none' and seq_kind ~= 'string' then
  return { 'corrupt', 'token sequence ' .. KEYS[2] .. ' holds a ' .. seq_kind }
end
local last = field(redis.call('GET', KEYS[2]))
if last ~= nil and not is_token(last) then
  return { 'corrupt', 'token sequence ' .. KEYS[2] .. ' is not a canonical u64 token' }
end
local token = increment(last)
if token == nil then return { 'exhausted' } end
redis.call('SET', KEYS[2], token)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return { 'ok', token }
