--- @include "keys.lua"
--- @include "inline.lua"
--- @needs KM, KK, LONE, inline_entry
--- @defines absorb
-- lone_absorb.lua: the lone lease, and its move into h.
-- The lone lease: a gate of capacity 1 that is free, with no line, no
-- barging waiter and nothing for the general path, grants a one-permit
-- request in key H (KK, named like m with the final "m" replaced by "H",
-- so under its hash tag) with SET NX PX: "<id> <gap>", expiring with m
-- (so it is there to be seen ended, and counted, as long as an inline
-- holder would be), where gap is how long H outlives the lease (ms): the
-- lease ends at H's expiry less gap, is live while H's PTTL exceeds gap,
-- and every caller reads the same end whatever its own IDLE. Its grant is
-- HMGET and PTTL of m (which must outlive the lease by IDLE; server
-- time is its expiry, field G, less its TTL, for the fence), SET, and
-- HSET of f and b; its release GET, PTTL and DEL of H; its renewal GET
-- and PTTL of H, PTTL of m and SET: no TIME, h, u or X
-- (lone_enter.lua, lone_leave.lua, lone_renew.lua, which run before
-- meta.lua). Every other call on a gate of capacity 1 first moves the lease
-- into h as an inline holder granted at once (fence 0), so nothing else
-- sees H: it is another representation of h's only holder, not another
-- state.
-- Moves a lone lease (H's value, if the caller read it) into h; true if
-- there was one (m was written).
local function absorb(entry)
  entry = entry or redis.call('GET', KK)
  if not entry then return false end
  local id, gap = string.match(entry, LONE)
  local ends = id and tonumber(gap)
  -- (A value from before the gap, "<id> <end>" with the end as server
  -- time, is read as such: no gap reaches 10^12 ms.)
  if ends and ends < 1e12 then ends = redis.call('PEXPIRETIME', KK) - ends end
  ends = ends and string.format('%d', ends)
  redis.call('DEL', KK)
  if not id then return false end
  redis.call('HSET', KM, 'h', inline_entry(id, ends, 0, 1), 'u', 1, 'X', ends)
  return true
end
