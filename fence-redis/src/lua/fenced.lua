-- The fenced envelope every fenced mutation runs in, fence-redis's own and its extensions':
-- admit (state integrity, op-id replay, the token rule) → the body's guard → advance the mark →
-- the body → remember the op. A body sets `guard` (optional: a refusal reply, or nil) and `body`
-- (returns the outcome to remember, a string, and the result to reply with); both get the fence
-- context (`token`, `previous`, and `state`, the domain's entry fields, read-only) and the
-- body's own KEYS and ARGV. They are defined before the envelope's variables, so no body (and
-- no user Lua inside one) can see or overwrite them.
-- fence-redis's own write body writes the state hash itself: composed with `sets_mark` true
-- (after the body, so no body can change it), it gets `fence.mark` (the mark's fields that
-- change, possibly none) and must write them in its first command, in the same HSET as its own
-- fields, so that one command carries the whole change. For every other body the envelope
-- writes its own copy of the mark before the body runs.
-- KEYS: state, op-id key, token sequence, the domain's bounds, then the body's. ARGV: token,
-- strict, has op id, op-id retention ms, op kind (one letter), the client's max token step (''
-- for none) and issued only ('1') — the domain's own bounds add to them —, always write the
-- mark ('1': a WAIT follows), then the body's.
local guard, body
--BODY--
local sets_mark = false --[[SETS_MARK]]

local state_key, op_key, seq_key, bounds_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, strict, has_op, kind = ARGV[1], ARGV[2] == '1', ARGV[3] == '1', ARGV[5]
local bounds, wrong = bounds_in_force(bounds_key, ARGV[6], ARGV[7] == '1', seq_key)
if not bounds then return { 'corrupt', wrong } end

local s, refusal = admit(state_key, op_key, token, strict, has_op, kind, bounds)
if not s then return refusal end
local body_keys, body_argv = {}, {}
for i = 5, #KEYS do body_keys[#body_keys + 1] = KEYS[i] end
for i = 9, #ARGV do body_argv[#body_argv + 1] = ARGV[i] end
local previous = s.hwm or ''
-- The mark's fields that change: none when the domain's mark already is this token (the same
-- holder's next change), so a steady writer propagates no mark command. Unless a WAIT follows:
-- then the change must propagate something, so that the WAIT also covers the mark it was
-- decided on (written by another client, perhaps not yet on a replica).
local mark
if s.hwm == nil then
  mark = { 'fence', '1', 'hwm', token }
elseif s.hwm ~= token or ARGV[8] == '1' then
  mark = { 'hwm', token }
else
  mark = {}
end
local fence = { state = s, token = token, previous = previous, mark = { unpack(mark) } }

if guard then
  local refused = guard(fence, body_keys, body_argv)
  if refused then return refused end
end
-- The mark advances before (or with) the body's first write: Redis does not roll back a script
-- that fails midway, and a failure must never leave the body's writes behind an unadvanced mark.
if not sets_mark and #mark > 0 then redis.call('HSET', state_key, unpack(mark)) end
local outcome, result = body(fence, body_keys, body_argv)
outcome = outcome or ''
-- The record comes after the body: a body that fails leaves none, so a retry runs it again.
if has_op then
  redis.call('SET', op_key, kind .. '|' .. previous .. '|' .. outcome, 'PX', ARGV[4])
end
return { 'ok', previous, outcome, result }
