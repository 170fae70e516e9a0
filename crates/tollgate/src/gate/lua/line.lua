--- @include "general.lua"
--- @needs KP, KQ, S, done, permits_of
-- line.lua: the first tickets of the line, head first (after expiring
-- what ended).
-- ARGV: 1 limit
-- Reply: {number, permits, label or '', number, permits, label or '', ...}
--        (a ticket's number is its score in q; its position is its place
--        in the reply)
-- Invariant: reads only; the general path's expiry is its only write. Ticket
-- ids never leave the script: an id lets whoever has it act as the
-- waiter, a number does not.
local limit = tonumber(ARGV[1])
local reply = {}
if S.waiting > 0 then
  local first = redis.call('ZRANGE', KQ, 0, limit - 1, 'WITHSCORES')
  for i = 1, #first, 2 do
    local id = first[i]
    local label = ''
    if S.a > 0 then label = redis.call('HGET', KP, 'L:' .. id) or '' end
    reply[#reply + 1] = tonumber(first[i + 1])
    reply[#reply + 1] = permits_of(id, S.n > 0)
    reply[#reply + 1] = label
  end
end
return done(reply)
