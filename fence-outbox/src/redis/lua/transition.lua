-- Fenced transition with outbox entries. KEYS: state, op-id key, outbox meta, outbox entries,
-- then the user's keys. ARGV: token, strict, has op id, op-id retention ms, partition, domain,
-- effect count, user argument count, the user's arguments, then one packed record per effect.
local state_key, op_key, meta_key, entries_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, strict, has_op = ARGV[1], ARGV[2] == '1', ARGV[3] == '1'
local effects, user_args = tonumber(ARGV[7]), tonumber(ARGV[8])

local s, refusal = admit(state_key, op_key, token, strict, has_op)
if not s then return refusal end
local o, reason = load_outbox(meta_key, entries_key)
if not o then return { 'corrupt', reason } end

-- Mark first: if the user's code fails midway, its partial writes sit behind an advanced mark.
redis.call('HSET', state_key, 'fence', '1', 'hwm', token)
local previous = s.hwm or ''

local user_keys, user_argv = {}, {}
for i = 5, #KEYS do user_keys[#user_keys + 1] = KEYS[i] end
for i = 1, user_args do user_argv[i] = ARGV[8 + i] end
local result = (function(KEYS, ARGV)
--USER-SCRIPT--
end)(user_keys, user_argv)

-- Entries and the op-id record come after the user's code: a failing user script leaves
-- neither behind, so a retry runs the whole transition again.
local first, last = o.last + 1, o.last
if effects > 0 then
  local now = fmt(server_ms()) .. '|'
  local fields = {}
  for i = 1, effects do
    last = last + 1
    fields[#fields + 1] = fmt(last)
    fields[#fields + 1] = now .. ARGV[8 + user_args + i]
  end
  redis.call('HSET', entries_key, unpack(fields))
  if o.exists then
    redis.call('HSET', meta_key, 'last', fmt(last))
  else
    redis.call('HSET', meta_key, 'outbox', '1', 'domain', ARGV[6], 'partition', ARGV[5],
      'last', fmt(last), 'done', '0', 'purged', '0')
  end
end
local outcome = previous .. '|' .. fmt(first) .. '|' .. fmt(last)
if has_op then redis.call('SET', op_key, outcome, 'PX', ARGV[4]) end
-- With entries already pending, the domain is already in the partition index (or the sweep
-- will put it back): the caller skips the hint.
local had_pending = o.last > o.done and '1' or '0'
return { 'ok', outcome, result, had_pending }
