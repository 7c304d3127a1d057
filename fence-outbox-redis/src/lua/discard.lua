-- Removes a dead letter an operator has dealt with. KEYS: meta, entries. ARGV: seq.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local p = ARGV[1] .. ':'
if redis.call('HGET', KEYS[2], p .. 's') ~= 'x' then return { 'ok', '0' } end
redis.call('HDEL', KEYS[2], ARGV[1], state_fields(p))
return { 'ok', '1' }
