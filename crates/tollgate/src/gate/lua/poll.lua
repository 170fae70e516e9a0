--- @include "held_fast.lua"
--- @include "general.lua"
--- @needs base, now, S, KQ, REMOVED_KEEP, done, promote, lookup, set_fence, set_expiry, set_deadline, eta
-- poll.lua: a waiter asks about its ticket; this is also its heartbeat, and
-- how it picks up a lease that was handed to it.
-- ARGV: 1 id, 2 ttl ms (the lease length once picked up), 3 heartbeat ms
-- Reply: {1, fence, ttl_ms}        granted (fence 0 if it was never a ticket)
--        {2, position, waiting, eta}  still in line (eta ms, -1 if not
--                                     known); heartbeat deadline moved on
--        {0}                       unknown: dropped, cancelled or expired
--        {3}                       removed from the line by an admin
--                                  (admin.lua) within REMOVED_KEEP
-- Invariant: a hand-off becomes a full lease only when its waiter asks.
local id, ttl, hb = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

local held, expires, f = lookup(id, true)
if held == 'ended' then
  promote()
  return done({0})
end
if held then
  if f < 0 then
    set_fence(id, -f)
    set_expiry(id, now + ttl)
    return done({1, -f, ttl})
  end
  return done({1, f, expires - now})
end

local rank = S.waiting > 0 and redis.call('ZRANK', KQ, id)
if not rank then
  -- Only a ticket found nowhere else looks in x (as was_removed in
  -- memory.rs).
  local at = tonumber(redis.call('ZSCORE', base .. 'x', id))
  if at and at > now - REMOVED_KEEP then return done({3}) end
  return done({0})
end
set_deadline(id, now + hb)
return done({2, rank + 1, S.waiting, eta(rank + 1)})
