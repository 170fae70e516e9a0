--- @include "lone_renew.lua"
--- @include "held_fast.lua"
--- @include "general.lua"
--- @needs now, done, promote, lookup, set_expiry, set_fence
-- renew.lua: extend a lease the caller still holds.
-- ARGV: 1 id, 2 ttl ms
-- Reply: {1, ttl_ms} renewed; {0} the lease had ended (never re-acquired)
-- Invariant: an ended lease is gone by now (the general path expired it, or
-- lookup does if its bounded step did not reach it), and
-- renewal cannot bring it back.
local id, ttl = ARGV[1], tonumber(ARGV[2])

local held, _, f = lookup(id, true)
if held == 'ended' then
  promote()
  return done({0})
end
if not held then return done({0}) end
set_expiry(id, now + ttl)
if f < 0 then set_fence(id, -f) end
return done({1, ttl})
