-- leave_fast.lua: releasing a live lease when nobody waits and there is no
-- side data (extra permits, hand-offs, labels), without the general path.
-- ARGV as leave.lua. Reply: {1} released, or falls through (also when a
-- lease may have ended: the general path expires and counts it, and for an
-- end, which the general path records).
-- Invariant: identical outcome to leave.lua for the same state.
local fast_H = tonumber(raw[9]) or 0
if not ARGV[2] and (tonumber(raw[10]) or 0) == 0 and (tonumber(raw[6]) or 0) == 0 and (tonumber(raw[8]) or 0) == 0
  and fast_H >= 1 and (tonumber(raw[14]) or 0) > now and (tonumber(raw[18]) or 0) == 0 then
  -- No lease has ended (X > now) and H is exact: removing ours is all.
  if redis.call('ZREM', KH, ARGV[1]) == 1 then
    -- A departure, for the estimated wait (as depart() in the prelude).
    local r, l = tonumber(raw[16]), tonumber(raw[17]) or 0
    if l > 0 then
      if r == nil then r = now - l else r = math.floor(r * 0.8 + (now - l) * 0.2 + 0.5) end
    end
    local fields = {'H', fast_H - 1, 'l', now}
    if fast_H == 1 then fields[#fields + 1], fields[#fields + 2] = 'X', 0 end
    if r ~= nil then fields[#fields + 1], fields[#fields + 2] = 'r', r end
    if not raw[24] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
    redis.call('HSET', KM, unpack(fields))
    return {1}
  end
end
