-- fence-outbox helpers, after fence-redis's prelude. A domain's outbox is two hashes under the
-- domain's hash tag: meta (outbox=1, domain, partition, last, done, purged, relay) and entries:
-- <seq> the packed record (written once), <seq>:s status (absent: pending; d delivered;
-- x dead letter), :a attempts, :e last error, :f settled ms, :by relay token.
-- Sequence numbers stay far below 2^53, so they are exact as Lua numbers.

local function seq_field(v)
  if v == nil then return 0 end
  if v == '0' then return 0 end
  if is_revision(v) then return tonumber(v) end
  return nil
end

local function fmt(n) return string.format('%.0f', n) end

local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Loads and validates a domain's outbox; returns nil and a reason when foreign or corrupt.
local function load_outbox(meta_key, entries_key)
  local m, wrong = hash_fields(meta_key, 'outbox state', 'outbox', 'last', 'done', 'purged', 'relay')
  if not m then return nil, wrong end
  local count = redis.pcall('HLEN', entries_key)
  if type(count) == 'table' and count['err'] then
    return nil, 'key ' .. entries_key .. ' holds a ' .. redis.call('TYPE', entries_key)['ok'] .. ', not outbox entries'
  end
  if not m[1] then
    if redis.call('EXISTS', meta_key) == 1 then
      return nil, 'hash ' .. meta_key .. ' has no outbox format marker'
    end
    if count > 0 then return nil, 'outbox entries without outbox state' end
    return { last = 0, done = 0, purged = 0, exists = false }
  end
  if m[1] ~= '1' then return nil, 'unknown outbox format `' .. m[1] .. '`' end
  local o = { last = seq_field(field(m[2])), done = seq_field(field(m[3])),
              purged = seq_field(field(m[4])), relay = field(m[5]), exists = true }
  if o.last == nil or o.done == nil or o.purged == nil or o.done > o.last or o.purged > o.done then
    return nil, 'outbox sequence fields are not consistent numbers'
  end
  if o.relay ~= nil and not is_token(o.relay) then
    return nil, 'relay mark is not a canonical u64 token'
  end
  return o
end

-- The relay's fence: a relay token below the domain's relay mark is stale.
local function relay_stale(o, relay)
  if o.relay ~= nil and cmp(relay, o.relay) < 0 then return { 'fenced', o.relay } end
  return nil
end

-- The fields of entry `seq` besides its record.
local function state_fields(p)
  return p .. 's', p .. 'a', p .. 'e', p .. 'f', p .. 'by'
end
