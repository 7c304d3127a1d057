-- Issue the next token of a domain. KEYS: sequence.
local token, refusal = next_token(KEYS[1])
if not token then return refusal end
return { 'ok', token }
