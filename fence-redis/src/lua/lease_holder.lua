-- The live lease of a domain, for inspection. KEYS: lease.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'none' then return { 'none' } end
if kind ~= 'hash' then return { 'corrupt', 'lease key ' .. KEYS[1] .. ' holds a ' .. kind } end
local f = redis.call('HMGET', KEYS[1], 'owner', 'token')
return { 'ok', field(f[1]) or '', field(f[2]) or '', tostring(redis.call('PTTL', KEYS[1])) }
