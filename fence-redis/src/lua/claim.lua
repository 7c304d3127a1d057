-- Claim, in the envelope: the mark advances and nothing else changes.
body = function(fence, KEYS, ARGV)
  return '', nil
end
