-- head.lua: the start of every gate script: server time and the meta
-- fields the fast paths need (see prelude.lua for the keys and fields). A
-- fast path may follow and answer alone; otherwise prelude.lua reads the
-- rest of the meta hash, and the operation's body runs.
local KM, KH, KP, KQ, KR = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local MARGIN, SMALL, CHUNK = 1000, 16, 10000
-- A gate of at most this capacity keeps its holders inline in m's field h.
local INLINE = 8
-- How long the meta hash outlives the last deadline the gate holds (ms):
-- the store's idle period. The Redis store writes its configured value
-- here (RedisConfig::idle) before loading the scripts.
local IDLE = 600000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- raw: 1 c, 2 f, 3 h, 4 H, 5 W, 6 s, 7 z, 8 n, 9 a, 10 P, 11 R, 12 r, 13 l,
-- 14 U, 15 V, 16 E, 17 G, 18 Y (HMGET answers false for a field that is
-- not there). Each field read costs Redis time, so the fast paths read
-- these alone; read_more() fetches the others when a path needs them.
local raw = redis.call('HMGET', KM, 'c', 'f', 'h', 'H', 'W', 's', 'z', 'n', 'a', 'P', 'R', 'r', 'l', 'U', 'V', 'E', 'G', 'Y')
local more
-- more: 1 b, 2 x, 3 e, 4 o, 5 T, 6 X, 7 A, 8 Q
local function read_more()
  if not more then more = redis.call('HMGET', KM, 'b', 'x', 'e', 'o', 'T', 'X', 'A', 'Q') end
  return more
end

-- A fresh epoch for state created now: server time in µs and three random
-- digits, as a decimal string (it exceeds what a Lua number holds exactly).
-- Time alone already differs between two incarnations of one gate's state;
-- the random digits cover a clock that went back (a failover to a replica
-- whose clock is behind). Redis 7 does not reseed math.random per script.
local function new_epoch()
  return t[1] .. string.format('%06d%03d', tonumber(t[2]), math.random(0, 999))
end

-- The meta hash's expiry once it must live past `last` (ms), or nil if
-- its TTL (remembered in G) already reaches that far. Set an IDLE / 4
-- beyond the need, so an active gate extends it about once per IDLE / 4.
local function meta_expiry(last)
  local need = last + IDLE
  if need <= (tonumber(raw[17]) or 0) then return nil end
  return need + math.floor(IDLE / 4)
end

-- Inline holders (m's field h): "<id> <expires> <fence> <permits>" per
-- holder, joined by ','. Ids are letters and digits. The fence is 0 for a
-- lease granted at once (not kept), -f for a hand-off not picked up yet,
-- f once picked up (as p's f:<id> on the sorted-set layout).
local function inline_holders(h)
  local all = {}
  if h and h ~= '' then
    for id, e, f, k in string.gmatch(h, '(%w+) (%d+) (%-?%d+) (%d+)') do
      all[#all + 1] = {id, tonumber(e), tonumber(f), tonumber(k)}
    end
  end
  return all
end
local function inline_text(all)
  local parts = {}
  for i, x in ipairs(all) do parts[i] = x[1] .. string.format(' %d %d %d', x[2], x[3], x[4]) end
  return table.concat(parts, ',')
end
