-- The permission probe: each command the fence's scripts call, on keys of the reserved probe
-- segment under the prefix (KEYS[1] a string, KEYS[2] a hash, KEYS[3] a list, one slot), with
-- redis.pcall so that one refusal does not stop the others. Returns the refused commands,
-- each followed by Redis's answer. Every key it creates expires within seconds.
local refused = {}
local function try(name, ...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then
    refused[#refused + 1] = name
    refused[#refused + 1] = reply.err
  end
end
try('TYPE', 'TYPE', KEYS[1])
try('EXISTS', 'EXISTS', KEYS[1])
try('GET', 'GET', KEYS[1])
try('SET', 'SET', KEYS[1], 'probe', 'PX', 10000)
try('HGET', 'HGET', KEYS[2], 'f')
try('HMGET', 'HMGET', KEYS[2], 'f', 'g')
try('HGETALL', 'HGETALL', KEYS[2])
try('HSET', 'HSET', KEYS[2], 'f', 'probe')
try('HDEL', 'HDEL', KEYS[2], 'g')
try('RPUSH', 'RPUSH', KEYS[3], 'probe')
try('LRANGE', 'LRANGE', KEYS[3], 0, 0)
try('PEXPIRE', 'PEXPIRE', KEYS[2], 10000)
redis.pcall('PEXPIRE', KEYS[3], 10000)
try('PTTL', 'PTTL', KEYS[1])
try('TIME', 'TIME')
try('DEL', 'DEL', KEYS[1], KEYS[2], KEYS[3])
return refused
