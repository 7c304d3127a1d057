-- Pending entries in order. KEYS: meta, entries. ARGV: limit.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local out = { 'ok' }
local stop = math.min(o.last, o.done + tonumber(ARGV[1]))
for seq = o.done + 1, stop do
  local p = fmt(seq) .. ':'
  local e = redis.call('HMGET', KEYS[2], p .. 'k', p .. 't', p .. 'd', p .. 'p', p .. 'c', p .. 'tok',
    p .. 's', p .. 'a', p .. 'e')
  if not e[1] or e[7] ~= 'p' then return { 'corrupt', 'pending entry ' .. fmt(seq) .. ' is missing or not pending' } end
  out[#out + 1] = fmt(seq)
  for i = 1, 8 do out[#out + 1] = e[i] or '' end
  out[#out + 1] = e[9] or ''
end
return out
