-- A domain's own admission settings (KEYS[1], its bounds hash): ARGV[1] 'get' reads them,
-- 'set' replaces them with ARGV[2] (max step, '' for none) and ARGV[3] ('1': issued only),
-- deleting the key when both are off. Answers the settings as stored.
if ARGV[1] == 'set' then
  redis.call('DEL', KEYS[1])
  if ARGV[2] ~= '' or ARGV[3] == '1' then
    if ARGV[2] ~= '' then
      redis.call('HSET', KEYS[1], 'max_step', ARGV[2], 'issued_only', ARGV[3])
    else
      redis.call('HSET', KEYS[1], 'issued_only', ARGV[3])
    end
  end
end
local b, reason = stored_bounds(KEYS[1])
if not b then return { 'corrupt', reason } end
return { 'ok', b.max_step, b.issued_only and '1' or '0' }
