--- @include "meta.lua"
--- @needs KM, base, now, clock, raw, read_meta
--- @defines KH, KP, KQ, KR, S, F, was, REMOVED_KEEP, REMOVED_MAX, DRAW_SPAN, F.end_draw
-- general_state.lua: the start of the general path (general.lua): server
-- time, the meta fields read_meta() reads (unless a fast path read them),
-- the rest of them, and from those the call's state S, with `was` (the
-- fields as read, so general_finish.lua writes back only what changed).
-- meta.lua (and possibly a fast path) ran before this: KM, base, MARGIN,
-- SMALL and now are set, and raw (the meta fields) too if a fast path
-- read them.
-- (The state in S and the helpers in F: see general.lua.)
clock()
if not raw then read_meta() end
local KH, KP, KQ, KR = base .. 'h', base .. 'p', base .. 'q', base .. 'r'
-- The meta fields read_meta() did not read: 1 x, 2 e, 3 o, 4 T, 5 A, 6 Q, 7 H,
-- 8 n, 9 a, 10 P, 11 R, 12 Y, 13 s, 14 U, 15 V, 16 D, 17 I, 18 J, 19 B, 20 O.
local m = redis.call('HMGET', KM, 'x', 'e', 'o', 'T', 'A', 'Q', 'H', 'n', 'a', 'P', 'R', 'Y', 's', 'U', 'V', 'D', 'I', 'J', 'B',
  'O')
local S, F = {
  now = now, KM = KM, KH = KH, KP = KP, KQ = KQ, KR = KR,
  cap = tonumber(raw[1]), f = tonumber(raw[2]) or 0, H = tonumber(m[7]) or 0, W = tonumber(raw[5]) or 0,
  s = tonumber(m[13]) or 0, z = tonumber(raw[6]) or 0, n = tonumber(m[8]) or 0,
  -- a: labels stored in p (holders and waiters); 0 lets removals skip a call.
  a = tonumber(m[9]) or 0,
  -- Admission control (written by set_admission.lua, A also here).
  P = tonumber(m[10]) or 0, R = tonumber(m[11]) or 0, A = tonumber(m[5]) or 0,
  -- The door: 1 while closed to newcomers; nobody admitted before I; the
  -- door closes at J (ms; 0: none). See set_admission.lua.
  D = tonumber(m[16]) or 0, I = tonumber(m[17]) or 0, J = tonumber(m[18]) or 0,
  -- The draw under way: its base (0: none; see enter.lua) and the key of
  -- the last draw's record.
  B = tonumber(m[19]) or 0, KD = base .. 'd',
  -- Random queueing's picks (0: first come, first served; see F.promote).
  O = tonumber(m[20]) or 0,
  -- r is absent (nil) until the line's first gap was measured.
  r = tonumber(raw[7]), l = tonumber(raw[8]) or 0,
  U = tonumber(m[14]) or 0, V = tonumber(m[15]) or 0, N = tonumber(raw[11]) or 0,
  -- Whether this call freed permits (a holder left, or the capacity or
  -- admission control let more in).
  freed = false,
  -- The stale-ticket sweep of a long line: cursor ('0' or absent: none
  -- under way) and the earliest deadline seen in the pass so far.
  Y = m[12] or '0', Q = tonumber(m[6]) or 0,
  b = tonumber(raw[14]) or 0, x = tonumber(m[1]) or 0, e = tonumber(m[2]) or 0, o = tonumber(m[3]) or 0,
  T = tonumber(m[4]) or 0, X = tonumber(raw[13]) or 0,
  -- Holders inline (m's h) unless the sorted set h holds them (H > 0);
  -- with no holder at all, the next grant picks by capacity (add_holder).
  inline = (tonumber(m[7]) or 0) == 0, held = nil, h_changed = false,
  -- Latest expiry written to h / deadline written to p by this call (0:
  -- none), and whether those keys may lack a TTL (empty before, or
  -- emptied since).
  h_top = 0, w_top = 0, p_touched = false, h_fresh = true, q_fresh = true, p_fresh = true,
  -- The expiry set on r (an end) or x (a removal) by this call, 0: none;
  -- and whether the
  -- body wrote m itself (settings): with any change to m, that makes this
  -- call activity, which keeps m IDLE past now too. Reads are not activity.
  r_top = 0, wrote_meta = false,
  holders = 0, waiting = 0,
  -- Hand-offs made by this call, "<ticket id>:<fence>" (also published).
  handed = {},
}, {}
-- The meta fields as read, to write back only what changed.
local was = {
  f = S.f, b = S.b, x = S.x, s = S.s, e = S.e, n = S.n, o = S.o, H = S.H, W = S.W, z = S.z, T = S.T,
  U = S.U, X = S.X, V = S.V, r = S.r, l = S.l, a = S.a, A = S.A, Y = S.Y, Q = S.Q, N = S.N, B = S.B, O = S.O,
}
-- A draw's key space (as DRAW_SPAN in src/gate/model.rs), and how long
-- the last draw's record is kept (ms).
local DRAW_SPAN, DRAW_KEEP = 17592186044416, 604800000
-- Ends the draw under way, if any: its tickets, head first, become the
-- last draw's record d (an empty draw leaves the last one), and the line
-- is one again (as GateState::end_draw in src/gate/model.rs).
function F.end_draw()
  if S.B == 0 then return end
  local low, high = string.format('%d', S.B), string.format('(%d', S.B + DRAW_SPAN)
  if redis.call('ZCOUNT', S.KQ, low, high) > 0 then
    redis.call('ZRANGESTORE', S.KD, S.KQ, low, high, 'BYSCORE')
    -- When it ended, as a member ahead of every ticket ('#' is in no id).
    redis.call('ZADD', S.KD, -1, '#' .. string.format('%d', S.now))
    redis.call('PEXPIRE', S.KD, DRAW_KEEP)
  end
  S.B = 0
end
-- The door's timers that are due run first, in this call's step (as
-- Door::tick in src/gate/types.rs): the hold before the opening ends (and
-- promotion, next, admits the head of the line), the door closes.
if S.I > 0 and S.I <= now then
  S.I, S.freed, S.wrote_meta = 0, true, true
  redis.call('HDEL', KM, 'I')
end
if S.I == 0 then F.end_draw() end
if S.J > 0 and S.J <= now then
  S.J, S.D, S.wrote_meta = 0, 1, true
  redis.call('HSET', KM, 'D', 1)
  redis.call('HDEL', KM, 'J')
end
-- How long, and how many, removed tickets x remembers (as REMOVED_KEEP_MS
-- and REMOVED_MAX in src/gate/types.rs).
local REMOVED_KEEP, REMOVED_MAX = 3600000, 1000
