-- keys.lua: the start of every gate script: the keys, the constants,
-- and the clock's two locals. Then, for enter, leave and renew, the lone
-- lease's path (lone_*.lua), before head.lua so that a call it answers
-- builds none of head.lua's functions (each closure Lua makes costs
-- Redis time on every call: head.lua's cost ~0.9 µs a call, measured).
-- Only m is passed (every key argument costs Redis time); the others
-- share its name up to the last letter (base), and so its hash tag; a fast
-- path names the ones it uses, prelude.lua all of them.
local KM = KEYS[1]
local base = string.sub(KM, 1, -2)
local MARGIN, SMALL, CHUNK = 1000, 16, 10000
-- A gate of at most this capacity keeps its holders inline in m's field h.
local INLINE = 8
-- How long the meta hash outlives the last deadline the gate holds (ms):
-- the store's idle period. The Redis store writes its configured value
-- here (RedisConfig::idle) before loading the scripts.
local IDLE = 600000
-- The lone lease's key and its value's pattern (id, then how long H
-- outlives the lease, ms: see head.lua).
local KK, LONE = base .. 'H', '^(%w+) (%d+)$'
-- Server time (ms), read by clock() (head.lua) where a path first needs
-- it: TIME costs ~0.7 µs, and a lone lease's grant and renewal need none.
local t, now
