--- @include "keys.lua"
--- @include "lone_absorb.lua"
--- @needs KM, base, IDLE, t, now, absorb
--- @defines clock, raw, read_meta, new_epoch, meta_expiry, wake_barging
-- meta.lua: after keys.lua (and a lone lease's path), what every gate
-- script but watch.lua shares: server time (clock), the meta fields the
-- fast paths need (read_meta, into raw; see keys.lua for the keys and
-- fields), m's epoch and expiry, and the barging waiters' wake-up. A fast
-- path may follow and answer alone; otherwise general.lua reads the rest
-- of the meta hash, and the operation's body runs.
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
-- general_state.lua reads the others for the general path. k marks state
-- the fast paths leave to the general path (see keys.lua).
local raw
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

-- Wakes up to `free` barging waiters (see N in keys.lua) in every
-- process listening on the gate's channel.
local function wake_barging(free)
  redis.call('PUBLISH', base .. 'n', '!' .. KM .. ' ' .. free)
end
