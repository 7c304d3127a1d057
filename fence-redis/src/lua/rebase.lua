-- An operator's re-base of a domain's mark (fence-core's Rebase::decide), recorded in the audit
-- list. KEYS: state, sequence, audit list. ARGV: new mark, reviewed mark, operator, reason,
-- '1' when the operator declared the domain's issuer to be elsewhere.
local s, reason = load_state(KEYS[1], false)
if not s then return { 'corrupt', reason } end
local to, expected = ARGV[1], ARGV[2]
if s.hwm ~= expected then return { 'moved', s.hwm or '' } end
local last, refusal = last_issued(KEYS[2])
if refusal then return refusal end
if last == nil and ARGV[5] ~= '1' then return { 'no_issuer' } end
-- Never below the sequence: no holder of an issued token older than the newest writes again.
if last ~= nil and cmp(to, last) < 0 then to = last end
if cmp(to, expected) >= 0 then return { 'passed', last } end
redis.call('HSET', KEYS[1], 'hwm', to)
if s.tok ~= nil and cmp(s.tok, to) > 0 then redis.call('HSET', KEYS[1], 'tok', to) end
local now = redis.call('TIME')
local at = now[1] .. string.format('%03d', math.floor(tonumber(now[2]) / 1000))
-- fence-core's RebaseRecord line: <unix ms>\t<from>\t<to>\t<operator>\t<reason>.
local line = at .. '\t' .. expected .. '\t' .. to .. '\t' .. ARGV[3] .. '\t' .. ARGV[4]
redis.call('RPUSH', KEYS[3], line)
return { 'ok', line }
