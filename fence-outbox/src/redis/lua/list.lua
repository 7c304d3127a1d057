-- Every entry still kept (pending, retained delivered, dead letters). KEYS: meta, entries.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local out = { 'ok' }
for seq = 1, o.last do
  local p = fmt(seq) .. ':'
  local e = redis.call('HMGET', KEYS[2], p .. 'k', p .. 't', p .. 'd', p .. 'p', p .. 'c', p .. 'tok',
    p .. 's', p .. 'a', p .. 'e', p .. 'f')
  if e[1] then
    out[#out + 1] = fmt(seq)
    for i = 1, 10 do out[#out + 1] = e[i] or '' end
  end
end
return out
