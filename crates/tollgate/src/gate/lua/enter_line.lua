-- enter_line.lua: a Lock's request whose handle saw a line last (the short
-- form of lone_enter.lua and a fifth argument, 'L': see GateName::lined),
-- before lone_enter.lua and head.lua: on a gate of one permit whose live
-- holder has a line behind it, the request queues at its back. As
-- enter_fast.lua's queueing, with nothing else built or read: TIME, one
-- HMGET of 13 fields, ZADD, HSET of the ticket's deadline, HSET of m.
-- Anything else (a free gate, no line yet, a stale ticket due, an ended
-- lease, anything for the general path) falls through with nothing done,
-- to lone_enter.lua, which reads the short form the same.
-- Reply as enter.lua, or falls through.
-- Invariant: identical outcome to enter.lua for the same state.
if ARGV[5] == 'L' and ARGV[4] == '1' then
  -- (The clock as head.lua's clock() reads it, which then reads no more.)
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local m = redis.call('HMGET', KM, 'c', 'h', 'k', 'W', 'z', 'r', 'E', 'G', 'u', 'X', 's', 'U', 'V')
  local waiting, z = tonumber(m[4]) or 0, tonumber(m[5]) or 0
  if m[1] == '1' and (m[2] or '') ~= '' and not m[3] and m[7] and (tonumber(m[9]) or 0) >= 1
    and (tonumber(m[10]) or 0) > now and waiting > 0 and (z == 0 or z > now) then
    local s, deadline = (tonumber(m[11]) or 0) + 1, now + tonumber(ARGV[3])
    local ds = string.format('%d', deadline)
    redis.call('ZADD', base .. 'q', s, ARGV[1])
    redis.call('HSET', base .. 'p', 'd:' .. ARGV[1], ds)
    local fields = {'s', s, 'W', waiting + 1}
    if z == 0 or deadline < z then fields[5], fields[6] = 'z', ds end
    -- q and p live past every deadline in them (as enter_fast.lua).
    local U, V, keep = tonumber(m[12]) or 0, tonumber(m[13]) or 0, deadline + MARGIN + CHUNK
    if deadline + MARGIN > U then
      redis.call('PEXPIREAT', base .. 'q', keep, 'GT')
      U = keep
      fields[#fields + 1], fields[#fields + 2] = 'U', U
    end
    if deadline + MARGIN > V then
      redis.call('PEXPIREAT', base .. 'p', keep, 'GT')
      V = keep
      fields[#fields + 1], fields[#fields + 2] = 'V', V
    end
    -- m outlives them by IDLE.
    line_write(fields, math.max(U, V), m[8])
    local position, r = waiting + 1, tonumber(m[6])
    return {2, position, position, r and position * r or -1}
  end
end
