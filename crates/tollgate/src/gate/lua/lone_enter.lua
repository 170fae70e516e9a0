--- @include "keys.lua"
--- @needs KM, IDLE, KK
--- @defines A, lone_read, lone_tried
-- lone_enter.lua: a Lock's request (one permit of a gate it names with
-- capacity 1, no label, not barging: a barging holder's release passes
-- the lease on, and a pass needs it in h) on a free gate of capacity 1
-- with an epoch, no line, no barging waiter and nothing for the general
-- path, whose m outlives the lease by IDLE, is granted as a lone lease
-- (see lone_absorb.lua): HMGET of 9 fields and PTTL of m (server time is m's
-- expiry, G, less its TTL, without TIME), SET NX PX of H
-- (expiring with m) and HSET of the fence. H's value keeps the lease's
-- end as its distance from H's expiry (m's TTL less the lease's).
-- Such a request comes in the short form of ARGV: 1 id, 2 ttl, 3
-- heartbeat, 4 queue (every argument costs Redis time), and 5 'L' when
-- its handle saw a line (for enter_line.lua, before this); any other, and
-- A for the rest of the script (enter_fast.lua, enter.lua), in
-- enter.lua's. Otherwise enter_fast.lua goes on with what was read
-- (lone_read, whose 7 f, 8 b and 9 G it takes; lone_tried: the gate looked
-- free, so H may hold a lease).
-- Reply as enter.lua, or falls through.
local A, lone_read, lone_tried = ARGV, nil, nil
if #ARGV == 4 or ARGV[5] == 'L' then
  lone_read = redis.call('HMGET', KM, 'c', 'h', 'k', 'W', 'E', 'N', 'f', 'b', 'G')
  local one = lone_read
  if one[1] == '1' and (one[2] or '') == '' and not one[3] and (tonumber(one[4]) or 0) == 0 and one[5] then
    lone_tried = true
    local ttl = tonumber(ARGV[2])
    -- (An m too short-lived for the lease, or without a TTL: the inline
    -- grant sets it. A barging waiter that may still wait, N in the
    -- future, is woken by the release only in h.)
    local left = redis.call('PTTL', KM)
    if left >= ttl + IDLE then
      -- (G is m's expiry as last set, with it in one step: a call less
      -- than PEXPIRETIME.)
      local at = (tonumber(one[9]) or redis.call('PEXPIRETIME', KM)) - left
      if not one[6] or tonumber(one[6]) <= at then
        local entry = ARGV[1] .. ' ' .. string.format('%d', left - ttl)
        if redis.call('SET', KK, entry, 'NX', 'PX', string.format('%d', left)) then
          -- The fence as next_fence() in general_grant.lua makes it.
          local f, b, floor = tonumber(one[7]) or 0, tonumber(one[8]) or 0, at * 1000
          if f < floor then f, b = floor, b + floor - f end
          f = f + 1
          redis.call('HSET', KM, 'f', string.format('%d', f), 'b', string.format('%d', b))
          return {1, f, ttl}
        end
      end
    end
  end
  A = {ARGV[1], '1', '1', ARGV[2], ARGV[3], ARGV[4], '', '0'}
end
