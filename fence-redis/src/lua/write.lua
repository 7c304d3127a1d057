-- Fenced put or delete. KEYS: state, op-id key (touched only when ARGV[8] == '1').
-- ARGV: token, strict ('1'|'0'), condition ('any'|'absent'|'rev'), expected revision,
--       mutation ('put'|'del'), value, op-id retention ms, has op id.
local state_key, op_key = KEYS[1], KEYS[2]
local token, strict, condition, expected = ARGV[1], ARGV[2] == '1', ARGV[3], ARGV[4]
local has_op = ARGV[8] == '1'

local s, refusal = admit(state_key, op_key, token, strict, has_op)
if not s then return refusal end
if (condition == 'absent' and s.state == 'v') or (condition == 'rev' and s.rev ~= expected) then
  return { 'mismatch', s.rev or '' }
end

local revision = string.format('%.0f', (s.rev and tonumber(s.rev) or 0) + 1)
if ARGV[5] == 'put' then
  redis.call('HSET', state_key, 'fence', '1', 'hwm', token, 'rev', revision, 'tok', token,
    'state', 'v', 'val', ARGV[6])
else
  redis.call('HSET', state_key, 'fence', '1', 'hwm', token, 'rev', revision, 'tok', token,
    'state', 't')
  redis.call('HDEL', state_key, 'val')
end
local previous = s.hwm or ''
if has_op then
  redis.call('SET', op_key, revision .. ':' .. previous, 'PX', ARGV[7])
end
return { 'ok', revision, previous }
