-- leave_fast.lua: releasing a live lease when nobody waits and there is no
-- side data, without the general path.
-- ARGV as leave.lua. Reply: {1} released, or falls through (also when any
-- lease has ended: the general path counts expiries).
-- Invariant: identical outcome to leave.lua for the same state.
local fast_H = tonumber(raw[9]) or 0
if (tonumber(raw[10]) or 0) == 0 and (tonumber(raw[6]) or 0) == 0 and (tonumber(raw[8]) or 0) == 0
  and fast_H >= 1 and fast_H <= SMALL then
  local all = redis.call('ZRANGE', KH, 0, -1, 'WITHSCORES')
  local mine, ended = false, false
  for i = 1, #all, 2 do
    if tonumber(all[i + 1]) <= now then ended = true end
    if all[i] == ARGV[1] then mine = true end
  end
  if mine and not ended then
    redis.call('ZREM', KH, ARGV[1])
    redis.call('HSET', KM, 'H', #all / 2 - 1)
    return {1}
  end
end
