-- admin.lua: an admin's revoke of a holder, or removal of a ticket from
-- the line. It finds the token and hands over to leave.lua, which
-- script.rs puts right after this file: the same step as the holder
-- ending its lease (with a keep: into the revocation log) or the ticket
-- leaving the line.
-- ARGV: 1 a holder's handle (the first 16 hex digits of the SHA-1 of its
--       token, as holders.lua lists it) or a ticket's number (its score in
--       q, as line.lua lists it), 2 keep ms for a revoke ('' for a
--       removal), 3 'h' (revoke a holder) or 'q' (remove a ticket)
-- Reply: leave.lua's: {1} revoked; {2} removed from the line; {0} no such
--        holder or ticket (ARGV[1] named none, or it ended already)
-- Invariant: as leave.lua: freed permits go to the head of the line in the
-- same step, and a revoked token is in r when this returns. A handle
-- never reveals a token; finding one reads every holder (at most the
-- capacity), a ticket number is one lookup in q.
local found
if ARGV[3] == 'h' then
  if holders > 0 then
    for _, id in ipairs(redis.call('ZRANGE', KH, 0, -1)) do
      if string.sub(redis.sha1hex(id), 1, 16) == ARGV[1] then
        found = id
        break
      end
    end
  end
elseif waiting > 0 then
  found = redis.call('ZRANGEBYSCORE', KQ, ARGV[1], ARGV[1], 'LIMIT', 0, 1)[1]
end
if not found then return done({0}) end
-- leave.lua reads the token from ARGV[1].
ARGV[1] = found
