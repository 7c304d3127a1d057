-- Retires a domain: KEYS[1] its lease key, KEYS[2..] the keys to delete (all of one slot).
-- A live lease refuses it, deleting nothing.
if redis.call('EXISTS', KEYS[1]) == 1 then return { 'held' } end
local removed = 0
for i = 2, #KEYS do removed = removed + redis.call('DEL', KEYS[i]) end
return { 'ok', tostring(removed) }
