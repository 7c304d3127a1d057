-- Every entry still kept (pending, retained delivered, dead letters), in order.
-- KEYS: meta, entries. Reply per entry: seq, record, status, attempts, last error, settled ms.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local out = { 'ok' }
for seq = 1, o.last do
  local id = fmt(seq)
  local p = id .. ':'
  local e = redis.call('HMGET', KEYS[2], id, p .. 's', p .. 'a', p .. 'e', p .. 'f')
  if e[1] then
    out[#out + 1] = id
    out[#out + 1] = e[1]
    for i = 2, 5 do out[#out + 1] = e[i] or '' end
  end
end
return out
