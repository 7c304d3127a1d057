-- Adopt a key another tool wrote, in the envelope. KEYS: state, the key to adopt, then (mode
-- 'key') the user key it becomes. ARGV: mode ('value' | 'key'), the greatest value in bytes.
guard = function(fence, KEYS, ARGV)
  local kind = redis.call('TYPE', KEYS[2])['ok']
  if kind == 'none' then return { 'no_source' } end
  if ARGV[1] == 'value' then
    if kind ~= 'string' then return { 'wrong_type', kind } end
    if fence.state.state ~= nil then return { 'has_entry' } end
    local size = redis.call('STRLEN', KEYS[2])
    if size > tonumber(ARGV[2]) then return { 'too_large', tostring(size) } end
  elseif redis.call('EXISTS', KEYS[3]) == 1 then
    return { 'target_exists' }
  end
  return nil
end

body = function(fence, KEYS, ARGV)
  if ARGV[1] == 'value' then
    local value = redis.call('GET', KEYS[2])
    redis.call('HSET', KEYS[1], 'rev', '1', 'tok', fence.token, 'state', 'v', 'val', value)
    redis.call('DEL', KEYS[2])
    return '1', '1'
  end
  redis.call('RENAME', KEYS[2], KEYS[3])
  return '', ''
end
