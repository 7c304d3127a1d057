-- Claim: raise the mark without data. KEYS: state. ARGV: token.
local s, reason = load_state(KEYS[1], false)
if not s then return { 'corrupt', reason } end
local current = stale(s, ARGV[1], false)
if current then return { 'fenced', current } end
redis.call('HSET', KEYS[1], 'fence', '1', 'hwm', ARGV[1])
return { 'ok', s.hwm or '' }
