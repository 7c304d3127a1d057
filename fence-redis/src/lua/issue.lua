-- Issue the next token of a domain. KEYS: sequence, state (for the floor at the mark).
local token, refusal = next_token(KEYS[1], KEYS[2])
if not token then return refusal end
return { 'ok', token }
