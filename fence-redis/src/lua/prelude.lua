-- fence-redis prelude: shared by every script. Tokens are canonical decimal strings compared by
-- length, then byte by byte: Lua numbers are doubles (exact only below 2^53), and string '<'
-- goes through the locale's collation.
local U64_MAX = '18446744073709551615'

local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y and -1 or 1 end
  end
  return 0
end

local function is_token(s)
  if type(s) ~= 'string' or #s == 0 or #s > 20 or not string.match(s, '^[1-9][0-9]*$') then
    return false
  end
  return #s < 20 or cmp(s, U64_MAX) <= 0
end

-- Revisions stay far below 2^53, so they are exact as Lua numbers.
local function is_revision(s)
  return type(s) == 'string' and #s <= 15 and string.match(s, '^[1-9][0-9]*$') ~= nil
end

local function field(v)
  if v == false then return nil end
  return v
end

-- The `fields` of hash `key` (HMGET answers for a missing key too, in one command), or nil and
-- a reason naming `what` the key should hold when it holds another type.
local function hash_fields(key, what, ...)
  local f = redis.pcall('HMGET', key, ...)
  if f['err'] then
    return nil, 'key ' .. key .. ' holds a ' .. redis.call('TYPE', key)['ok'] .. ', not ' .. what
  end
  return f
end

-- Loads and validates a domain's state hash; returns nil and a reason for foreign or corrupt state.
local function load_state(key, with_value)
  local f, wrong = hash_fields(key, 'fence state', 'fence', 'hwm', 'rev', 'tok', 'state')
  if not f then return nil, wrong end
  if not f[1] and not f[2] and not f[3] and not f[4] and not f[5] then
    -- No fence fields: a missing key, or someone else's hash.
    if redis.call('EXISTS', key) == 0 then return {} end
    return nil, 'hash ' .. key .. ' has no fence format marker'
  end
  if field(f[1]) ~= '1' then return nil, 'hash ' .. key .. ' has no fence format marker' end
  local s = { hwm = field(f[2]), rev = field(f[3]), tok = field(f[4]), state = field(f[5]) }
  if not is_token(s.hwm) then return nil, 'high-water mark is not a canonical u64 token' end
  if s.state ~= nil then
    if s.state ~= 'v' and s.state ~= 't' then return nil, 'unknown entry state' end
    if not is_revision(s.rev) then return nil, 'revision is not a canonical number' end
    if not is_token(s.tok) then return nil, 'writer token is not a canonical u64 token' end
    if cmp(s.tok, s.hwm) > 0 then return nil, 'writer token above the high-water mark' end
  elseif s.rev ~= nil or s.tok ~= nil then
    return nil, 'revision or writer token without an entry'
  end
  if with_value and s.state == 'v' then
    s.val = field(redis.call('HGET', key, 'val'))
    if s.val == nil then return nil, 'live entry without a value' end
  end
  return s
end

-- The token rule: returns the current mark when the presented token is stale.
local function stale(s, token, strict)
  if s.hwm == nil then return nil end
  local c = cmp(token, s.hwm)
  if c < 0 or (c == 0 and strict) then return s.hwm end
  return nil
end

-- The sum of two canonical decimal strings (not bounded to u64).
local function add(a, b)
  local out, carry, i, j = {}, 0, #a, #b
  while i >= 1 or j >= 1 or carry > 0 do
    local x = (i >= 1 and string.byte(a, i) - 48 or 0) + (j >= 1 and string.byte(b, j) - 48 or 0)
    local d = x + carry
    carry = d >= 10 and 1 or 0
    table.insert(out, 1, string.char(48 + d % 10))
    i, j = i - 1, j - 1
  end
  return table.concat(out)
end

-- Increments a canonical decimal string; nil at u64::MAX.
local function increment(s)
  if s == nil then return '1' end
  if s == U64_MAX then return nil end
  local digits = { string.byte(s, 1, -1) }
  local i = #digits
  while i >= 1 and digits[i] == 57 do digits[i] = 48; i = i - 1 end
  if i == 0 then return '1' .. string.char(unpack(digits)) end
  digits[i] = digits[i] + 1
  return string.char(unpack(digits))
end

-- An op-id record in the format before the envelope (written within one retention window
-- before an upgrade): a write's `revision:previous`, a script's `previous`, an outbox
-- transition's `previous|first|last`. Returns kind, previous mark and outcome, or nil.
local function legacy_record(record)
  local revision, previous = string.match(record, '^([0-9]+):([0-9]*)$')
  if revision then return 'w', previous, revision end
  if string.match(record, '^[0-9]*$') then return 's', record, '' end
  local mark, first, last = string.match(record, '^([0-9]*)|([0-9]+)|([0-9]+)$')
  if mark then return 'x', mark, first .. '|' .. last end
  return nil
end

-- The last token of a domain's sequence key (nil: none issued), or nil and the reply to return.
local function last_issued(seq_key)
  local kind = redis.call('TYPE', seq_key)['ok']
  if kind ~= 'none' and kind ~= 'string' then
    return nil, { 'corrupt', 'token sequence ' .. seq_key .. ' holds a ' .. kind }
  end
  local last = field(redis.call('GET', seq_key))
  if last ~= nil and not is_token(last) then
    return nil, { 'corrupt', 'token sequence ' .. seq_key .. ' is not a canonical u64 token' }
  end
  return last
end

-- A domain's own admission settings (its bounds hash: `max_step`, a canonical token, and
-- `issued_only`, '1' or '0'; no key: none), or nil and why the key is not Fence's. Every write
-- reads it and most domains have none: HGETALL answers a missing key with no fields, so one
-- command tells it from someone else's hash (HMGET would need an EXISTS more).
local function stored_bounds(key)
  local all = redis.pcall('HGETALL', key)
  if all['err'] then
    return nil, 'key ' .. key .. ' holds a ' .. redis.call('TYPE', key)['ok'] .. ', not fence bounds'
  end
  if #all == 0 then return { max_step = '', issued_only = false } end
  local step, issued
  for i = 1, #all, 2 do
    if all[i] == 'max_step' then step = all[i + 1] elseif all[i] == 'issued_only' then issued = all[i + 1] end
  end
  if step == nil and issued == nil then return nil, 'hash ' .. key .. ' holds no fence bounds' end
  if step ~= nil and not is_token(step) then
    return nil, 'bounds ' .. key .. ': max_step is not a canonical u64 token'
  end
  if issued ~= '1' and issued ~= '0' then
    return nil, 'bounds ' .. key .. ': issued_only is not 0 or 1'
  end
  return { max_step = step or '', issued_only = issued == '1' }
end

-- The bounds in force: the tighter of the client's (`max_step`, '' for none, and
-- `issued_only`) and the domain's own (`key`), or nil and why the domain's are not Fence's.
local function bounds_in_force(key, max_step, issued_only, seq_key)
  local b, reason = stored_bounds(key)
  if not b then return nil, reason end
  local step = max_step
  if b.max_step ~= '' and (step == '' or cmp(b.max_step, step) < 0) then step = b.max_step end
  return { max_step = step, issued_only = issued_only or b.issued_only, seq_key = seq_key }
end

-- fence-core's admission, after the token rule: a token the domain's sequence never issued
-- (when issued only), or one more than max_step above the mark (from zero without one), is
-- refused. Returns the reply to return as is, or nil.
local function inadmissible(s, token, bounds)
  if bounds.issued_only then
    local last, refusal = last_issued(bounds.seq_key)
    if refusal then return refusal end
    if last == nil or cmp(token, last) > 0 then return { 'unissued', last or '' } end
  end
  if bounds.max_step ~= '' and cmp(token, add(s.hwm or '0', bounds.max_step)) > 0 then
    return { 'too_far', s.hwm or '', bounds.max_step }
  end
  return nil
end

-- What every fenced mutation checks first: state integrity, operation-id replay, the token rule,
-- admission (`bounds`). An op-id record is `<kind>|<previous mark>|<outcome>`. Returns the state,
-- or nil and the reply to return as is.
local function admit(state_key, op_key, token, strict, has_op, kind, bounds)
  local s, reason = load_state(state_key, false)
  if not s then return nil, { 'corrupt', reason } end
  if has_op then
    local first = redis.call('GET', op_key)
    if first then
      -- A replay writes too (the record's own expiry, unchanged), so that a WAIT after it, on
      -- any connection, waits for the replicas to hold the first run's change.
      local ttl = redis.call('PTTL', op_key)
      if ttl > 0 then redis.call('PEXPIRE', op_key, ttl) end
      local stored, previous, outcome = string.match(first, '^(%a)|([0-9]*)|(.*)$')
      if not stored then stored, previous, outcome = legacy_record(first) end
      if not stored then
        return nil, { 'corrupt', 'operation id record ' .. op_key .. ' is not `kind|mark|outcome`' }
      end
      if stored ~= kind then return nil, { 'op_kind', stored } end
      return nil, { 'dup', previous, outcome }
    end
  end
  local current = stale(s, token, strict)
  if current then return nil, { 'fenced', current } end
  local refusal = inadmissible(s, token, bounds)
  if refusal then return nil, refusal end
  return s
end

-- Issues the next token from a domain's sequence key, floored above the domain's mark (in
-- state_key): a sequence that was deleted or restored from an old snapshot never issues a token
-- the resource already fences. Returns the token, or nil and the reply to return as is.
local function next_token(seq_key, state_key)
  local last, refusal = last_issued(seq_key)
  if refusal then return nil, refusal end
  local s, reason = load_state(state_key, false)
  if not s then return nil, { 'corrupt', reason } end
  if s.hwm ~= nil and (last == nil or cmp(last, s.hwm) < 0) then last = s.hwm end
  local token = increment(last)
  if token == nil then return nil, { 'exhausted' } end
  redis.call('SET', seq_key, token)
  return token
end
