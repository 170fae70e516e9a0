--- @defines inline_entry, inline_find
-- inline.lua: the format of a gate's inline holders (m's field h), shared
-- by the fast paths and the general path.
-- Inline holders (m's field h): "<id> <expires> <fence> <permits>" per
-- holder, joined by ','. Ids are letters and digits. The fence is 0 for a
-- lease granted at once (not kept), -f for a hand-off not picked up yet,
-- f once picked up (as p's f:<id> on the sorted-set layout). Beside h, u
-- is the permits they hold and X no earlier than their first end, so the
-- fast paths append and cut entries without reading the others.
-- (Expiries and permits are below 10^14, so Lua writes them exactly; a
-- fence needs a format.)
local function inline_entry(id, expires, fence, permits)
  local f = fence == 0 and '0' or string.format('%d', fence)
  return id .. ' ' .. expires .. ' ' .. f .. ' ' .. permits
end
-- Where holder `id`'s entry starts and ends in h, or nil.
local function inline_find(h, id)
  local at = 1
  while true do
    local i = string.find(h, id .. ' ', at, true)
    if not i then return nil end
    if i == 1 or string.sub(h, i - 1, i - 1) == ',' then
      local j = string.find(h, ',', i, true)
      return i, (j or #h + 1) - 1
    end
    at = i + 1
  end
end
