-- Pending entries in order. KEYS: meta, entries. ARGV: limit.
-- Reply per entry: seq, record, status, attempts, last error, settled ms.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local out = { 'ok' }
local stop = math.min(o.last, o.done + tonumber(ARGV[1]))
for seq = o.done + 1, stop do
  local id = fmt(seq)
  local p = id .. ':'
  local e = redis.call('HMGET', KEYS[2], id, p .. 's', p .. 'a', p .. 'e')
  if not e[1] or e[2] then
    return { 'corrupt', 'pending entry ' .. id .. ' is missing or already settled' }
  end
  out[#out + 1] = id
  out[#out + 1] = e[1]
  out[#out + 1] = ''
  out[#out + 1] = e[3] or '0'
  out[#out + 1] = e[4] or ''
  out[#out + 1] = ''
end
return out
