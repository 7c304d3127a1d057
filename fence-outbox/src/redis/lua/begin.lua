-- Starts an attempt on the head entry. KEYS: meta, entries. ARGV: relay token, seq.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local relay, seq = ARGV[1], tonumber(ARGV[2])
local stale = relay_stale(o, relay)
if stale then return stale end
if seq ~= o.done + 1 or seq > o.last then return { 'moved', fmt(o.done) } end
redis.call('HSET', KEYS[1], 'relay', relay)
local p = fmt(seq) .. ':'
if redis.call('HGET', KEYS[2], p .. 's') ~= 'p' then
  return { 'corrupt', 'head entry ' .. fmt(seq) .. ' is missing or not pending' }
end
local attempts = redis.call('HINCRBY', KEYS[2], p .. 'a', 1)
redis.call('HSET', KEYS[2], p .. 'by', relay)
return { 'ok', tostring(attempts) }
