-- Fenced user script. KEYS: state, op-id key, then the user's keys.
-- ARGV: token, strict, has op id, op-id retention ms, then the user's arguments.
local state_key, op_key = KEYS[1], KEYS[2]
local token, strict, has_op = ARGV[1], ARGV[2] == '1', ARGV[3] == '1'

local s, refusal = admit(state_key, op_key, token, strict, has_op)
if not s then return refusal end
-- The mark advances before the user's code runs: Redis does not roll back a script that fails
-- midway, and a failure must never leave the user's writes behind an unadvanced mark.
redis.call('HSET', state_key, 'fence', '1', 'hwm', token)
local previous = s.hwm or ''
if has_op then redis.call('SET', op_key, previous, 'PX', ARGV[4]) end

local user_keys, user_argv = {}, {}
for i = 3, #KEYS do user_keys[#user_keys + 1] = KEYS[i] end
for i = 5, #ARGV do user_argv[#user_argv + 1] = ARGV[i] end
local result = (function(KEYS, ARGV)
--USER-SCRIPT--
end)(user_keys, user_argv)
return { 'ok', previous, result }
