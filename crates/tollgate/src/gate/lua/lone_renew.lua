--- @include "keys.lua"
--- @needs KM, IDLE, KK, LONE
-- lone_renew.lua: renewing a live lone lease (see lone_absorb.lua) whose m
-- outlives the renewed lease by IDLE: GET and PTTL of H, PTTL of m, SET
-- of H with the new end, expiring with m. Anything else falls through
-- (held_fast.lua's read_meta() moves the lease into h, and the inline
-- renewal extends m).
-- ARGV as renew.lua. Reply as renew.lua, or falls through.
local lone_id, lone_gap = string.match(redis.call('GET', KK) or '', LONE)
if lone_id == ARGV[1] then
  local ttl = tonumber(ARGV[2])
  local left = redis.call('PTTL', KM)
  if left >= ttl + IDLE and redis.call('PTTL', KK) > tonumber(lone_gap) then
    local entry = ARGV[1] .. ' ' .. string.format('%d', left - ttl)
    redis.call('SET', KK, entry, 'PX', string.format('%d', left))
    return {1, ttl}
  end
end
