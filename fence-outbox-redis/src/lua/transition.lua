-- Fenced transition with outbox entries, a body in fence-redis's envelope.
-- KEYS: outbox meta, outbox entries, then the user's keys. ARGV: partition, domain, effect count,
-- user argument count, the user's arguments, then one packed record per effect.
-- Outcome: `first|last` sequence numbers. Result: { had pending ('1'|'0'), the user's result }.
guard = function(fence, KEYS, ARGV)
  local o, reason = load_outbox(KEYS[1], KEYS[2])
  if not o then return { 'corrupt', reason } end
  fence.outbox = o
  return nil
end

body = function(fence, KEYS, ARGV)
  local o, meta_key, entries_key = fence.outbox, KEYS[1], KEYS[2]
  local effects, user_args = tonumber(ARGV[3]), tonumber(ARGV[4])
  local user_keys, user_argv = {}, {}
  for i = 3, #KEYS do user_keys[#user_keys + 1] = KEYS[i] end
  for i = 1, user_args do user_argv[i] = ARGV[4 + i] end
  -- The user's Lua, defined before everything else: it sees only its own KEYS and ARGV.
  local result = fenced_user_script(user_keys, user_argv)

  -- Entries come after the user's code: a failing user script leaves none behind (and, in the
  -- envelope, no op-id record), so a retry runs the whole transition again.
  local first, last = o.last + 1, o.last
  if effects > 0 then
    local now = fmt(server_ms()) .. '|'
    local fields = {}
    for i = 1, effects do
      last = last + 1
      fields[#fields + 1] = fmt(last)
      fields[#fields + 1] = now .. ARGV[4 + user_args + i]
    end
    redis.call('HSET', entries_key, unpack(fields))
    if o.exists then
      redis.call('HSET', meta_key, 'last', fmt(last))
    else
      redis.call('HSET', meta_key, 'outbox', '1', 'domain', ARGV[2], 'partition', ARGV[1],
        'last', fmt(last), 'done', '0', 'purged', '0')
    end
  end
  -- With entries already pending, the domain is already in the partition index (or the sweep
  -- will put it back): the caller skips the hint.
  local had_pending = o.last > o.done and '1' or '0'
  return fmt(first) .. '|' .. fmt(last), { had_pending, result }
end
