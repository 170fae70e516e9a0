-- renew.lua: extend a lease the caller still holds.
-- ARGV: 1 id, 2 ttl ms
-- Reply: {1, ttl_ms} renewed; {0} the lease had ended (never re-acquired)
-- Invariant: the prelude expired ended leases first, so an ended lease is
-- gone by now and renewal cannot bring it back.
local id, ttl = ARGV[1], tonumber(ARGV[2])

if holders == 0 or not redis.call('ZSCORE', KH, id) then return done({0}) end
set_expiry(id, now + ttl)
if Mo > 0 then
  local f = tonumber(redis.call('HGET', KP, 'f:' .. id))
  if f and f < 0 then redis.call('HSET', KP, 'f:' .. id, -f) end
end
return done({1, ttl})
