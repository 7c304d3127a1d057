-- Read the entry with the mark. KEYS: state. ARGV: '1' to include the value.
local s, reason = load_state(KEYS[1], ARGV[1] == '1')
if not s then return { 'corrupt', reason } end
return { 'ok', s.hwm or '', s.state or '', s.tok or '', s.rev or '', s.val or '' }
