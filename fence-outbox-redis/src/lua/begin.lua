-- Starts an attempt on the head entry. KEYS: meta, entries. ARGV: relay token, seq.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local relay, seq = ARGV[1], tonumber(ARGV[2])
local stale = relay_stale(o, relay)
if stale then return stale end
if seq ~= o.done + 1 or seq > o.last then return { 'moved', fmt(o.done) } end
redis.call('HSET', KEYS[1], 'relay', relay)
local id = fmt(seq)
local e = redis.call('HMGET', KEYS[2], id, id .. ':s')
if not e[1] or e[2] then
  return { 'corrupt', 'head entry ' .. id .. ' is missing or already settled' }
end
local attempts = redis.call('HINCRBY', KEYS[2], id .. ':a', 1)
redis.call('HSET', KEYS[2], id .. ':by', relay)
return { 'ok', tostring(attempts) }
