-- Fenced put or delete, in the envelope. KEYS: state. ARGV: condition ('any'|'absent'|'rev'),
-- expected revision, mutation ('put'|'del'), value. Outcome and result: the new revision.
guard = function(fence, KEYS, ARGV)
  local s, condition = fence.state, ARGV[1]
  if (condition == 'absent' and s.state == 'v') or (condition == 'rev' and s.rev ~= ARGV[2]) then
    return { 'mismatch', s.rev or '' }
  end
  return nil
end

body = function(fence, KEYS, ARGV)
  local s = fence.state
  local revision = string.format('%.0f', (s.rev and tonumber(s.rev) or 0) + 1)
  if ARGV[3] == 'put' then
    redis.call('HSET', KEYS[1], 'rev', revision, 'tok', fence.token, 'state', 'v', 'val', ARGV[4])
  else
    redis.call('HSET', KEYS[1], 'rev', revision, 'tok', fence.token, 'state', 't')
    redis.call('HDEL', KEYS[1], 'val')
  end
  return revision, revision
end
