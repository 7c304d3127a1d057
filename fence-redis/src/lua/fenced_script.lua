-- A user's fenced script, in the envelope. The user's Lua is the function `fenced_user_script`,
-- defined before everything else: it sees only its own KEYS and ARGV.
body = function(fence, KEYS, ARGV)
  return '', fenced_user_script(KEYS, ARGV)
end
