-- enter.lua: take permits now, or join the line.
-- ARGV: 1 id (lease token, and ticket id if queued), 2 permits, 3 capacity
--       (0: use the stored one), 4 ttl ms, 5 heartbeat ms, 6 queue (1/0),
--       7 label ('' for none)
-- Reply: {1, fence, ttl_ms}           granted
--        {2, position, waiting, eta}  queued (position 1 is the head;
--                                     eta ms, -1 if not known yet)
--        {3, used, capacity, waiting} busy (not queued on request)
--        {-1, capacity}  the request's capacity conflicts with the stored one
--        {-2, capacity}  more permits than the capacity
--        {-3}            no capacity stored and none given
-- Invariant: a newcomer never overtakes the line; if anyone waits, it queues.
local id, permits = ARGV[1], tonumber(ARGV[2])
local asked, ttl, hb, queue = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6] == '1'
local label = ARGV[7]

-- The label goes with the id: it stays when a ticket becomes a holder.
local function keep_label()
  if label ~= '' then
    redis.call('HSET', KP, 'L:' .. id, label)
    Ma = Ma + 1
    p_touched = true
  end
end

if cap == nil then
  if asked == 0 then return done({-3}) end
  cap = asked
  redis.call('HSET', KM, 'c', cap)
elseif asked ~= 0 and asked ~= cap then
  return done({-1, cap})
end
if permits > cap then return done({-2, cap}) end

if waiting == 0 and used() + permits <= cap and may_admit() then
  admitted()
  local f = next_fence()
  add_holder(id, now + ttl)
  keep_label()
  if permits > 1 then
    redis.call('HSET', KP, 'k:' .. id, permits)
    p_touched = true
    Me = Me + permits - 1
  end
  return done({1, f, ttl})
end

if not queue then return done({3, used(), cap, waiting}) end

Ms = Ms + 1
redis.call('ZADD', KQ, Ms, id)
set_deadline(id, now + hb)
keep_label()
if permits > 1 then
  redis.call('HSET', KP, 'k:' .. id, permits)
  p_touched = true
  Mn = Mn + 1
end
waiting = waiting + 1
return done({2, waiting, waiting, eta(waiting)})
