-- Removes delivered entries settled more than the retention window ago; dead letters stay.
-- KEYS: meta, entries. ARGV: relay token, retention ms, most entries to remove.
local o, reason = load_outbox(KEYS[1], KEYS[2])
if not o then return { 'corrupt', reason } end
local relay = ARGV[1]
local stale = relay_stale(o, relay)
if stale then return stale end
if o.last == 0 then return { 'ok', '0' } end
redis.call('HSET', KEYS[1], 'relay', relay)
local cutoff = server_ms() - tonumber(ARGV[2])
local removed, most, purged = 0, tonumber(ARGV[3]), o.purged
while purged < o.done and removed < most do
  local seq = purged + 1
  local p = fmt(seq) .. ':'
  local st = redis.call('HMGET', KEYS[2], p .. 's', p .. 'f')
  if st[1] == 'd' then
    local settled = tonumber(st[2])
    if settled == nil then return { 'corrupt', 'delivered entry ' .. fmt(seq) .. ' has no settle time' } end
    if settled > cutoff then break end
    redis.call('HDEL', KEYS[2], fmt(seq), state_fields(p))
    removed = removed + 1
  elseif st[1] ~= 'x' then
    return { 'corrupt', 'settled entry ' .. fmt(seq) .. ' is neither delivered nor dead-lettered' }
  end
  purged = seq
end
redis.call('HSET', KEYS[1], 'purged', fmt(purged))
return { 'ok', tostring(removed) }
