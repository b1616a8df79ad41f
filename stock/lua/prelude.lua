-- The prelude: prepended by the one loader (stock/scripts/loader.py) to every script
-- before Redis sees it, so each script finds these helpers defined. Helpers only: no
-- Redis call and no KEYS or ARGV here.
--
-- Every argument is checked before a script's first write: a script that fails half-way
-- leaves a partial write behind (Redis does not roll back).

-- ``value`` as a whole number of at least ``least``; nil when it is not one (a fraction,
-- a word, empty, missing) or is smaller.
local function whole(value, least)
  if type(value) ~= 'string' or not string.match(value, '^%-?%d+$') then
    return nil
  end
  local n = tonumber(value)
  if n < least then
    return nil
  end
  return n
end
