-- Issue the next token of a domain. KEYS: sequence.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then
  return { 'corrupt', 'token sequence ' .. KEYS[1] .. ' holds a ' .. kind }
end
local last = field(redis.call('GET', KEYS[1]))
if last ~= nil and not is_token(last) then
  return { 'corrupt', 'token sequence ' .. KEYS[1] .. ' is not a canonical u64 token' }
end
local token = increment(last)
if token == nil then return { 'exhausted' } end
redis.call('SET', KEYS[1], token)
return { 'ok', token }
