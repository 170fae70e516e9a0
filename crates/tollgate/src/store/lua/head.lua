-- head.lua: the start of every gate script: server time and the gate's meta
-- fields (see prelude.lua for the keys and fields). A fast path may follow
-- and answer alone; otherwise prelude.lua and the operation's body run.
local KM, KH, KP, KQ = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local MARGIN, SMALL, CHUNK = 1000, 16, 10000
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local raw = redis.call('HMGET', KM, 'c', 'f', 'b', 'x', 's', 'e', 'n', 'o', 'H', 'W', 'z', 'T', 'U', 'X', 'V', 'r', 'l', 'a', 'P', 'R', 'A', 'Y', 'Q')
