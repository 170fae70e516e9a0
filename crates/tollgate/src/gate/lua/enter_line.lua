--- @include "keys.lua"
--- @include "line_write.lua"
--- @needs KM, base, MARGIN, CHUNK, t, now, line_write
-- enter_line.lua: a Lock's request whose handle saw a line last (the short
-- form of lone_enter.lua and a fifth argument, 'L': see GateName::lined),
-- before lone_enter.lua and meta.lua: on a gate of one permit whose live
-- holder has a line behind it, the request queues at its back. As
-- enter_fast.lua's queueing, with nothing else built or read: TIME, one
-- HMGET of 13 fields, ZADD, HSET of the ticket's deadline, HSET of m.
-- Anything else (a free gate, no line yet, a stale ticket due, an ended
-- lease, anything for the general path) falls through with nothing done,
-- to lone_enter.lua, which reads the short form the same.
-- Reply as enter.lua, or falls through.
-- Invariant: identical outcome to enter.lua for the same state.
if ARGV[5] == 'L' and ARGV[4] == '1' then
  -- (The clock as meta.lua's clock() reads it, which then reads no more.)
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local m = redis.call('HMGET', KM, 'c', 'h', 'k', 'W', 'z', 'r', 'E', 'G', 'u', 'X', 's', 'U', 'V')
  local waiting, z = tonumber(m[4]) or 0, tonumber(m[5]) or 0
  if m[1] == '1' and (m[2] or '') ~= '' and not m[3] and m[7] and (tonumber(m[9]) or 0) >= 1
    and (tonumber(m[10]) or 0) > now and waiting > 0 and (z == 0 or z > now) then
    -- (Someone waits: q and p have their TTLs.)
    --- @inline "line_join.lua" id=ARGV[1], hb=ARGV[3], s0=m[11], U0=m[12], V0=m[13], waiting=waiting, z=z, first=false, kq=base .. 'q', kp=base .. 'p'
    -- m outlives them by IDLE.
    line_write(fields, math.max(U, V), m[8])
    local position, r = waiting + 1, tonumber(m[6])
    return {2, position, position, r and position * r or -1}
  end
end
