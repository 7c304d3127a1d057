-- Fenced put or delete, in the envelope. KEYS: state. ARGV: condition ('any'|'absent'|'rev'),
-- expected revision, mutation ('put'|'del'), value. Outcome and result: the new revision.
guard = function(fence, KEYS, ARGV)
  local s, condition = fence.state, ARGV[1]
  if (condition == 'absent' and s.state == 'v') or (condition == 'rev' and s.rev ~= ARGV[2]) then
    return { 'mismatch', s.rev or '' }
  end
  return nil
end

-- One HSET carries the mark and the entry (KEYS[1] is the state hash): composed with
-- `sets_mark` (scripts.rs), the body writes `fence.mark` itself.
body = function(fence, KEYS, ARGV)
  local s = fence.state
  local revision = string.format('%.0f', (s.rev and tonumber(s.rev) or 0) + 1)
  local fields = { unpack(fence.mark) }
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = 'rev', revision, 'tok', fence.token
  fields[n + 5], fields[n + 6] = 'state', ARGV[3] == 'put' and 'v' or 't'
  if ARGV[3] == 'put' then
    fields[n + 7], fields[n + 8] = 'val', ARGV[4]
    redis.call('HSET', KEYS[1], unpack(fields))
  else
    redis.call('HSET', KEYS[1], unpack(fields))
    redis.call('HDEL', KEYS[1], 'val')
  end
  return revision, revision
end
