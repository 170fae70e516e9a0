-- head.lua: the start of every gate script: server time and the gate's meta
-- fields (see prelude.lua for the keys and fields). A fast path may follow
-- and answer alone; otherwise prelude.lua and the operation's body run.
local KM, KH, KP, KQ, KR = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local MARGIN, SMALL, CHUNK = 1000, 16, 10000
-- How long the meta hash outlives the last deadline the gate holds (ms):
-- the store's idle period. The Redis store writes its configured value
-- here (RedisConfig::idle) before loading the scripts.
local IDLE = 600000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.call('HMGET', KM, 'c', 'f', 'b', 'x', 's', 'e', 'n', 'o', 'H', 'W', 'z', 'T', 'U', 'X', 'V', 'r', 'l', 'a', 'P', 'R', 'A', 'Y', 'Q', 'E', 'G')

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
  if need <= (tonumber(raw[25]) or 0) then return nil end
  return need + math.floor(IDLE / 4)
end
