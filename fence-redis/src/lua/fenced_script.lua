-- A user's fenced script, in the envelope: the user's Lua sees only its own KEYS and ARGV.
body = function(fence, KEYS, ARGV)
  local result = (function(KEYS, ARGV)
--USER-SCRIPT--
  end)(KEYS, ARGV)
  return '', result
end
