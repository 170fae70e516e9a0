-- renew.lua: extend a lease the caller still holds.
-- ARGV: 1 id, 2 ttl ms
-- Reply: {1, ttl_ms} renewed; {0} the lease had ended (never re-acquired)
-- Invariant: an ended lease is gone by now (the prelude expired it, or
-- expire_one does if the prelude's bounded step did not reach it), and
-- renewal cannot bring it back.
local id, ttl = ARGV[1], tonumber(ARGV[2])

if expire_one(id) then
  promote()
  return done({0})
end
if S.holders == 0 or not redis.call('ZSCORE', KH, id) then return done({0}) end
set_expiry(id, now + ttl)
if S.o > 0 then
  local f = tonumber(redis.call('HGET', KP, 'f:' .. id))
  if f and f < 0 then redis.call('HSET', KP, 'f:' .. id, -f) end
end
return done({1, ttl})
