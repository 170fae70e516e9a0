-- lone_enter.lua: a Lock's request (one permit of a gate it names with
-- capacity 1, no label, not barging: a barging holder's release passes
-- the lease on, and a pass needs it in h) on a free gate of capacity 1
-- with an epoch, no line, no barging waiter and nothing for the general
-- path, whose m outlives the lease by IDLE, is granted as a lone lease
-- (see head.lua): HMGET of 6 fields, PTTL of m, SET NX PX of H (expiring
-- with m) and HINCRBY of the fence. No server time: H's value keeps the
-- lease's end as its distance from H's expiry (m's TTL less the lease's).
-- Such a request comes in the short form of ARGV: 1 id, 2 ttl, 3
-- heartbeat, 4 queue (every argument costs Redis time), and 5 'L' when
-- its handle saw a line (for enter_line.lua, before this); any other, and
-- A for the rest of the script (enter_fast.lua, enter.lua), in
-- enter.lua's. Otherwise enter_fast.lua goes on with what was read
-- (lone_read; lone_tried: the gate looked free, so H may hold a lease).
-- Reply as enter.lua, or falls through.
local A, lone_read, lone_tried = ARGV, nil, nil
if #ARGV == 4 or ARGV[5] == 'L' then
  lone_read = redis.call('HMGET', KM, 'c', 'h', 'k', 'W', 'E', 'N')
  local one = lone_read
  if one[1] == '1' and (one[2] or '') == '' and not one[3] and (tonumber(one[4]) or 0) == 0 and one[5] then
    lone_tried = true
    local ttl = tonumber(ARGV[2])
    -- (An m too short-lived for the lease, or without a TTL: the inline
    -- grant sets it. A barging waiter that may still wait, N in the
    -- future, is woken by the release only in h: server time is m's
    -- expiry less its TTL, read only then.)
    local left = redis.call('PTTL', KM)
    if left >= ttl + IDLE and (not one[6] or tonumber(one[6]) <= redis.call('PEXPIRETIME', KM) - left) then
      local entry = ARGV[1] .. ' ' .. string.format('%d', left - ttl)
      if redis.call('SET', KK, entry, 'NX', 'PX', string.format('%d', left)) then
        local f = redis.call('HINCRBY', KM, 'f', '1')
        if f == 1 then
          -- The gate's first fence (its capacity was set before any
          -- grant): from server time x 1000, as next_fence() in the prelude.
          f = (redis.call('PEXPIRETIME', KM) - left) * 1000 + 1
          redis.call('HSET', KM, 'f', string.format('%d', f), 'b', string.format('%d', f - 1))
        end
        return {1, f, ttl}
      end
    end
  end
  A = {ARGV[1], '1', '1', ARGV[2], ARGV[3], ARGV[4], '', '0'}
end
