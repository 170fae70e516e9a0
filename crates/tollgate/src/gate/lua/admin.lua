--- @include "general.lua"
--- @include "line_clear.lua"
--- @needs KQ, base, MARGIN, now, S, F, REMOVED_KEEP, REMOVED_MAX, done, clear_line
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
-- A reset is line_clear.lua's.
-- Invariant: as leave_general.lua: freed permits go to the head of the line in the
-- same step, and a revoked token is in r when this returns. A handle
-- never reveals a token; finding one reads every holder (at most the
-- capacity), a ticket number is one lookup in q.
if ARGV[3] == 'c' then return done({3, clear_line()}) end
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
