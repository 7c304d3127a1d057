-- Records an attempt's result on the head entry. KEYS: meta, entries.
-- ARGV: relay token, seq, outcome ('d' delivered | 'x' dead letter | 'r' retry), error.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local relay, seq, outcome = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local stale = relay_stale(o, relay)
if stale then return stale end
if seq ~= o.done + 1 or seq > o.last then return { 'moved', fmt(o.done) } end
redis.call('HSET', KEYS[1], 'relay', relay)
local id = fmt(seq)
local p = id .. ':'
local e = redis.call('HMGET', KEYS[2], id, p .. 's')
if not e[1] or e[2] then
  return { 'corrupt', 'head entry ' .. id .. ' is missing or already settled' }
end
if outcome == 'r' then
  redis.call('HSET', KEYS[2], p .. 'e', ARGV[4])
else
  redis.call('HSET', KEYS[2], p .. 's', outcome, p .. 'f', fmt(server_ms()), p .. 'by', relay)
  if outcome == 'x' then redis.call('HSET', KEYS[2], p .. 'e', ARGV[4]) end
  redis.call('HSET', KEYS[1], 'done', id)
end
return { 'ok' }
