-- head.lua: after keys.lua (and a lone lease's path), the functions
-- every gate script shares: server time and the meta fields the fast
-- paths need (see prelude.lua for the keys and fields). A fast path may
-- follow and answer alone; otherwise prelude.lua reads the rest of the
-- meta hash, and the operation's body runs.
local function clock()
  if not now then
    t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
end
-- raw: 1 c, 2 f, 3 h, 4 k, 5 W, 6 z, 7 r, 8 l, 9 E, 10 G, 11 N, 12 u,
-- 13 X, 14 b, and for a request that may queue 15 s, 16 U, 17 V (HMGET answers
-- false for a field that is not there), read by
-- read_meta() once a script needs them: a fast path for a gate of one
-- permit reads fewer first (and answers alone, or falls through to this
-- read). Each field read costs Redis time (a small hash is a list: every
-- field looked up, above all a missing one, is a scan), so the fast paths
-- read these alone (a queueing enter also the line's s, U and V);
-- prelude.lua reads the others for the general path. k marks state the
-- fast paths leave to the general path (see prelude.lua).
local raw
local absorb
-- With `line` (a request that may queue), also the line's s, U and V
-- (15 to 17; nil when not read), in the same call. (f and b: a grant's
-- fence is next_fence()'s, which moves b with f.)
local function read_meta(line)
  for _ = 1, 2 do
    if line then
      raw = redis.call('HMGET', KM, 'c', 'f', 'h', 'k', 'W', 'z', 'r', 'l', 'E', 'G', 'N', 'u', 'X', 'b', 's', 'U', 'V')
    else
      raw = redis.call('HMGET', KM, 'c', 'f', 'h', 'k', 'W', 'z', 'r', 'l', 'E', 'G', 'N', 'u', 'X', 'b')
    end
    -- A lone lease (key H, below) exists only on a gate of capacity 1
    -- with no holder in h: into h first, then read again (once: h then
    -- holds it).
    if not ((raw[1] == '1' or not raw[1]) and (raw[3] or '') == '' and absorb()) then return end
  end
end

-- A fresh epoch for state created now: server time in µs and three random
-- digits, as a decimal string (it exceeds what a Lua number holds exactly).
-- Time alone already differs between two incarnations of one gate's state;
-- the random digits cover a clock that went back (a failover to a replica
-- whose clock is behind). Redis 7 does not reseed math.random per script.
local function new_epoch()
  clock()
  return t[1] .. string.format('%06d%03d', tonumber(t[2]), math.random(0, 999))
end

-- The meta hash's expiry once it must live past `last` (ms), or nil if
-- its TTL (G, the field as read) already reaches that far. Set an IDLE / 4
-- beyond the need, so an active gate extends it about once per IDLE / 4.
local function meta_expiry(last, G)
  local need = last + IDLE
  if need <= (tonumber(G) or 0) then return nil end
  return need + math.floor(IDLE / 4)
end

-- Wakes up to `free` barging waiters (see N in prelude.lua) in every
-- process listening on the gate's channel.
local function wake_barging(free)
  redis.call('PUBLISH', base .. 'n', '!' .. KM .. ' ' .. free)
end

-- Inline holders (m's field h): "<id> <expires> <fence> <permits>" per
-- holder, joined by ','. Ids are letters and digits. The fence is 0 for a
-- lease granted at once (not kept), -f for a hand-off not picked up yet,
-- f once picked up (as p's f:<id> on the sorted-set layout). Beside h, u
-- is the permits they hold and X no earlier than their first end, so the
-- fast paths append and cut entries without reading the others.
-- (Expiries and permits are below 10^14, so Lua writes them exactly; a
-- fence needs a format.)
local function inline_entry(id, expires, fence, permits)
  local f = fence == 0 and '0' or string.format('%d', fence)
  return id .. ' ' .. expires .. ' ' .. f .. ' ' .. permits
end
-- Where holder `id`'s entry starts and ends in h, or nil.
local function inline_find(h, id)
  local at = 1
  while true do
    local i = string.find(h, id .. ' ', at, true)
    if not i then return nil end
    if i == 1 or string.sub(h, i - 1, i - 1) == ',' then
      local j = string.find(h, ',', i, true)
      return i, (j or #h + 1) - 1
    end
    at = i + 1
  end
end

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
-- (lone_enter.lua, lone_leave.lua, lone_renew.lua, which run before this
-- file). Every other call on a gate of capacity 1 first moves the lease
-- into h as an inline holder granted at once (fence 0), so nothing else
-- sees H: it is another representation of h's only holder, not another
-- state.
-- Moves a lone lease (H's value, if the caller read it) into h; true if
-- there was one (m was written).
absorb = function(entry)
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
