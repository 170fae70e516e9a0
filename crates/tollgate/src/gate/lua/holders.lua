--- @include "general.lua"
--- @needs KP, now, S, F, done
--- @needs F.holder_list
-- holders.lua: the current holders, soonest to end first (after expiring
-- what ended).
-- ARGV: 1 limit
-- Reply: {ttl_ms, label or '', handle, fence, ttl_ms, ...} (fence 0: a
--        lease granted at once, whose fence is not kept)
--        (handle: the first 16 hex digits of the SHA-1 of the token, which
--        names the lease to admin.lua without giving its token away)
-- Invariant: reads only; the general path's expiry is its only write.
local limit = tonumber(ARGV[1])
local reply = {}
for _, x in ipairs(F.holder_list(limit)) do
  local label = ''
  if S.a > 0 then label = redis.call('HGET', KP, 'L:' .. x[1]) or '' end
  reply[#reply + 1] = math.max(0, x[2] - now)
  reply[#reply + 1] = label
  reply[#reply + 1] = string.sub(redis.sha1hex(x[1]), 1, 16)
  -- Only a lease handed through the line keeps its fence (negative until
  -- picked up).
  reply[#reply + 1] = math.abs(x[3])
end
return done(reply)
