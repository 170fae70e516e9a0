-- leave_fast.lua: releasing a live lease when nobody waits and there is no
-- side data, without the general path.
-- ARGV as leave.lua. Reply: {1} released, or falls through (also when a
-- lease may have ended: the general path expires and counts it).
-- Invariant: identical outcome to leave.lua for the same state.
local fast_H = tonumber(raw[9]) or 0
if (tonumber(raw[10]) or 0) == 0 and (tonumber(raw[6]) or 0) == 0 and (tonumber(raw[8]) or 0) == 0
  and fast_H >= 1 and (tonumber(raw[14]) or 0) > now then
  -- No lease has ended (X > now) and H is exact: removing ours is all.
  if redis.call('ZREM', KH, ARGV[1]) == 1 then
    if fast_H == 1 then
      redis.call('HSET', KM, 'H', 0, 'X', 0)
    else
      redis.call('HSET', KM, 'H', fast_H - 1)
    end
    return {1}
  end
end
