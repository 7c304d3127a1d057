-- Re-drives a dead letter an operator has dealt with: its record (same idempotency key, token,
-- recording time) becomes a new pending entry after the last, and the dead letter goes.
-- KEYS: meta, entries. ARGV: seq. Reply: the new entry's seq, or '0' when seq is no dead letter.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local p = ARGV[1] .. ':'
if redis.call('HGET', KEYS[2], p .. 's') ~= 'x' then return { 'ok', '0' } end
local record = redis.call('HGET', KEYS[2], ARGV[1])
if not record then return { 'corrupt', 'dead letter ' .. ARGV[1] .. ' has no record' } end
local seq = fmt(o.last + 1)
redis.call('HSET', KEYS[2], seq, record)
redis.call('HDEL', KEYS[2], ARGV[1], state_fields(p))
redis.call('HSET', KEYS[1], 'last', seq)
return { 'ok', seq }
