--- @include "general.lua"
--- @needs KM, KP, KQ, base, MARGIN, now, S, F, REMOVED_KEEP, REMOVED_MAX, done, note_side_data
-- admin.lua: an admin's revoke of a holder, removal of a ticket from the
-- line, or reset of the whole line. For the first two it finds the token
-- and hands over to leave_general.lua, included at the end of this file:
-- the same step as the holder ending its lease (with a keep: into the
-- revocation log) or the ticket leaving the line (recorded in x first, so
-- its waiter's next poll learns it was removed). A reset ends here.
-- ARGV: 1 a holder's handle (the first 16 hex digits of the SHA-1 of its
--       token, as holders.lua lists it) or a ticket's number (its score in
--       q, as line.lua lists it), 2 keep ms for a revoke ('' for a
--       removal), 3 'h' (revoke a holder), 'q' (remove a ticket) or 'c'
--       (clear the line: ARGV 1 and 2 unused)
-- Reply: leave_general.lua's (with its hand-offs): {1} revoked; {2} removed from
--        the line; {0} no such holder or ticket (ARGV[1] named none, or it
--        ended already);
--        for a reset {3, tickets dropped}
-- A reset drops every ticket in one step (holders are not touched) and
-- writes its time to m's C, so a waiter told its ticket is gone can learn
-- whether a reset took it. It costs O(line) in this one step, in chunks of
-- CLEAR_STEP so no call carries more than that many arguments.
-- Invariant: as leave_general.lua: freed permits go to the head of the line in the
-- same step, and a revoked token is in r when this returns. A handle
-- never reveals a token; finding one reads every holder (at most the
-- capacity), a ticket number is one lookup in q.
if ARGV[3] == 'c' then
  local CLEAR_STEP, dropped = 1000, 0
  -- Until q is read empty, whatever the counters say (W is 0 only when
  -- q surely is).
  local ids = {}
  if S.waiting > 0 then ids = redis.call('ZRANGE', KQ, 0, CLEAR_STEP - 1) end
  while #ids > 0 do
    local side, labels = {}, {}
    for i, id in ipairs(ids) do
      side[2 * i - 1], side[2 * i] = 'd:' .. id, 'k:' .. id
      labels[i] = 'L:' .. id
    end
    redis.call('HDEL', KP, unpack(side))
    if S.a > 0 then S.a = S.a - redis.call('HDEL', KP, unpack(labels)) end
    redis.call('ZREMRANGEBYRANK', KQ, 0, #ids - 1)
    dropped = dropped + #ids
    ids = redis.call('ZRANGE', KQ, 0, CLEAR_STEP - 1)
  end
  -- Nobody waits: no multi-permit waiter, no deadline, no sweep under way.
  S.waiting, S.n, S.z, S.Y, S.Q, S.q_fresh = 0, 0, 0, '0', 0, true
  note_side_data()
  redis.call('HSET', KM, 'C', now)
  S.wrote_meta = true
  return done({3, dropped})
end
local found
if ARGV[3] == 'h' then
  for _, x in ipairs(F.holder_list(S.holders)) do
    if string.sub(redis.sha1hex(x[1]), 1, 16) == ARGV[1] then
      found = x[1]
      break
    end
  end
elseif S.waiting > 0 then
  found = redis.call('ZRANGEBYSCORE', KQ, ARGV[1], ARGV[1], 'LIMIT', 0, 1)[1]
end
if not found then return done({0}) end
if ARGV[3] == 'q' then
  -- Remembered REMOVED_KEEP, the latest REMOVED_MAX (as note_removed in
  -- memory.rs); the key goes REMOVED_KEEP after the last removal.
  local KX, keep_until = base .. 'x', now + REMOVED_KEEP
  redis.call('ZREMRANGEBYSCORE', KX, '-inf', now - REMOVED_KEEP)
  redis.call('ZADD', KX, now, found)
  local over = redis.call('ZCARD', KX) - REMOVED_MAX
  if over > 0 then redis.call('ZREMRANGEBYRANK', KX, 0, over - 1) end
  redis.call('PEXPIREAT', KX, keep_until + MARGIN)
  S.r_top = math.max(S.r_top, keep_until + MARGIN)
end
-- leave_general.lua reads the token from ARGV[1].
ARGV[1] = found
--- @include "leave_general.lua"
--- @needs F.holder_list
