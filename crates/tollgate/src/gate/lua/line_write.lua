--- @include "keys.lua"
--- @needs KM, IDLE
--- @defines line_write
-- line_write.lua: before enter_line.lua and leave_line.lua, which build
-- none of meta.lua's functions: writes m's `fields` and keeps m alive
-- until IDLE past `last` (ms), as meta_expiry() in meta.lua does from
-- m's G as read. Built only for a call with 'L' (ARGV[3] of a leave,
-- ARGV[5] of an enter; neither is ever 'L' in the other's arguments): the
-- lone lease's paths, next, build no function.
local line_write
if ARGV[3] == 'L' or ARGV[5] == 'L' then
  line_write = function(fields, last, G)
    local need = last + IDLE
    if need > (tonumber(G) or 0) then
      local keep = need + math.floor(IDLE / 4)
      fields[#fields + 1], fields[#fields + 2] = 'G', keep
      redis.call('HSET', KM, unpack(fields))
      redis.call('PEXPIREAT', KM, keep)
    else
      redis.call('HSET', KM, unpack(fields))
    end
  end
end
