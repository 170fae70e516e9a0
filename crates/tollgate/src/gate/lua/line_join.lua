--- @snippet id, hb, s0, U0, V0, waiting, z, first, kq, kp
-- line_join.lua: a fast path's queueing of a single-permit request at
-- the back of the line (as enter.lua's queueing and set_deadline() on the
-- general path): ticket `id` gets the next seq (s0: m's s as read) in q
-- (key kq) and a heartbeat deadline `hb` ms from now in p (key kp); q and
-- p live past every deadline in them (as keep_until() in
-- general_finish.lua; U0 and V0: m's U and V as read). `first`: nobody
-- waited before (false where the caller knows someone does), so q and p
-- may lack a TTL (inline holders keep no side data in p, and there are
-- no labels) and the line's pace starts its clock (as enter.lua). Leaves
-- the locals `fields` (m's fields to write: s, W, and z, U, V and l if
-- they change) and U and V (q's and p's TTLs now) to the caller, which
-- writes m to outlive max(U, V) by IDLE. Numbers go as '%d' text made
-- here, cheaper than redis.call's own conversion. Copied (--- @inline)
-- into enter_fast.lua and enter_line.lua.
local s, deadline = (tonumber(s0) or 0) + 1, now + tonumber(hb)
local ds = string.format('%d', deadline)
redis.call('ZADD', kq, s, id)
redis.call('HSET', kp, 'd:' .. id, ds)
local fields = {'s', s, 'W', waiting + 1}
if z == 0 or deadline < z then fields[5], fields[6] = 'z', ds end
local U, V, keep = tonumber(U0) or 0, tonumber(V0) or 0, deadline + MARGIN + CHUNK
if first then
  redis.call('PEXPIREAT', kq, keep)
  redis.call('PEXPIREAT', kp, keep)
  U, V = keep, keep
  local ks = string.format('%d', keep)
  fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'U', ks, 'V', ks
  fields[#fields + 1], fields[#fields + 2] = 'l', string.format('%d', now)
else
  if deadline + MARGIN > U then
    redis.call('PEXPIREAT', kq, keep, 'GT')
    U = keep
    fields[#fields + 1], fields[#fields + 2] = 'U', U
  end
  if deadline + MARGIN > V then
    redis.call('PEXPIREAT', kp, keep, 'GT')
    V = keep
    fields[#fields + 1], fields[#fields + 2] = 'V', V
  end
end
