-- lone_enter.lua: a one-permit request (the caller asks for capacity 1:
-- a mutex; not a barging one, whose release would pass the lease on, and
-- a pass needs it in h) on a free gate of capacity 1 with a fence and an
-- epoch, no line and nothing for the general path, whose m outlives the
-- lease by IDLE, is granted as a lone lease (see head.lua): HMGET of 6
-- fields, PTTL, SET NX PX and HINCRBY. Otherwise enter_fast.lua goes on
-- with what was read (lone_read; lone_tried: the gate looked free, so H
-- may hold a lease).
-- ARGV as enter.lua. Reply as enter.lua, or falls through.
local lone_read, lone_tried
if ARGV[3] == '1' and ARGV[2] == '1' and ARGV[7] == '' and ARGV[8] ~= '1' then
  lone_read = redis.call('HMGET', KM, 'c', 'h', 'f', 'k', 'W', 'E')
  local one = lone_read
  if one[1] == '1' and (one[2] or '') == '' and one[3] and not one[4] and (tonumber(one[5]) or 0) == 0
    and one[6] then
    lone_tried = true
    local ttl = tonumber(ARGV[4])
    local left = redis.call('PTTL', KM)
    -- (An m too short-lived for the lease: the inline grant extends it.)
    if (left == -1 or left >= ttl + IDLE) and redis.call('SET', KK, ARGV[1], 'NX', 'PX', ttl + IDLE) then
      return {1, redis.call('HINCRBY', KM, 'f', 1), ttl}
    end
  end
end
