--- @include "enter_line.lua"
--- @include "lone_enter.lua"
--- @include "enter_fast.lua"
--- @include "general.lua"
--- @needs KM, KP, KQ, now, A, S, done, used, may_admit, admitted, next_fence, add_holder, set_deadline, eta
--- @needs DRAW_SPAN
-- enter.lua: take permits now, or join the line.
-- ARGV: 1 id (lease token, and ticket id if queued), 2 permits, 3 capacity
--       (0: use the stored one), 4 ttl ms, 5 heartbeat ms, 6 queue (1/0),
--       7 label ('' for none), 8 '1' if a busy caller waits to barge in
--       (a non-fair acquire: see N in keys.lua), 9 the ticket's order key
--       in a draw (below DRAW_SPAN; '' for none); read as A, since a
--       Lock's request comes in a short form (see lone_enter.lua)
-- Reply: {1, fence, ttl_ms}           granted
--        {2, position, waiting, eta}  queued (position 1 is the head;
--                                     eta ms, -1 if not known yet)
--        {3, used, capacity, waiting} busy (not queued on request)
--        {-1, capacity}  the request's capacity conflicts with the stored one
--        {-2, capacity}  more permits than the capacity
--        {-3}            no capacity stored and none given
--        {-4}            the door is closed (set_admission.lua)
-- Invariant: a newcomer never overtakes the line; if anyone waits, it queues.
local id, permits = A[1], tonumber(A[2])
local asked, ttl, hb, queue = tonumber(A[3]), tonumber(A[4]), tonumber(A[5]), A[6] == '1'
local label, key = A[7], tonumber(A[9] or '')

-- The label goes with the id: it stays when a ticket becomes a holder.
local function keep_label()
  if label ~= '' then
    redis.call('HSET', KP, 'L:' .. id, label)
    S.a = S.a + 1
    S.p_touched = true
  end
end

if S.cap == nil then
  if asked == 0 then return done({-3}) end
  S.cap = asked
  redis.call('HSET', KM, 'c', S.cap)
elseif asked ~= 0 and asked ~= S.cap then
  return done({-1, S.cap})
end
if permits > S.cap then return done({-2, S.cap}) end
-- A closed door lets nobody new in (k is set meanwhile: no fast path
-- answers).
if S.D ~= 0 then return done({-4}) end

if S.waiting == 0 and used() + permits <= S.cap and may_admit() then
  admitted()
  local f = next_fence()
  add_holder(id, now + ttl, 0, permits)
  keep_label()
  return done({1, f, ttl})
end

if not queue then
  if A[8] == '1' and S.N < now + math.floor(hb / 2) then S.N = now + hb end
  return done({3, used(), S.cap, S.waiting})
end

-- A line that forms starts the clock of its pace (see line_moved()).
if S.waiting == 0 then S.l = now end
-- With an order key while an opening is pending (I), the ticket joins the
-- draw: the first such ticket starts it at base B = s + 1 and moves s
-- past the draw's key space, so whoever joins later stands behind it;
-- the draw's tickets are scored B + key, their order settled as they join
-- (the opening just admits from the head; general_state.lua ends the
-- draw). A draw that starts with nobody in line starts s again from 0,
-- so draws do not use up the numbers. s stays below 2^53, exact in Lua's
-- numbers: past that (some 500 draws each begun with a line), the
-- ticket joins in turn (as GateState::queue in src/gate/model.rs).
local score
if key and S.I > 0 then
  if S.B == 0 and S.waiting == 0 then S.s = 0 end
  if S.B == 0 and S.s + 1 + DRAW_SPAN < 9007199254740992 then
    S.B = S.s + 1
    S.s = S.B + DRAW_SPAN
  end
  if S.B > 0 then score = S.B + key end
end
if score == nil then
  S.s = S.s + 1
  score = S.s
end
redis.call('ZADD', KQ, score, id)
set_deadline(id, now + hb)
keep_label()
if permits > 1 then
  redis.call('HSET', KP, 'k:' .. id, permits)
  S.p_touched = true
  S.n = S.n + 1
end
S.waiting = S.waiting + 1
local position = S.waiting
if score ~= S.s then position = redis.call('ZRANK', KQ, id) + 1 end
return done({2, position, S.waiting, eta(position)})
