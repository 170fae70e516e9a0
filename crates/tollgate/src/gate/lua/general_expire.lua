--- @include "general_line.lua"
--- @needs S, F, raw, SMALL
--- @defines EXPIRE_STEP, F.expire
--- @needs F.forget_label, F.holder_side, F.inline_holders, F.remove_holder, F.sweep
-- general_expire.lua: the general path's first step, expiry: ended
-- leases go (a bounded number per call on the sorted set), and the line
-- is counted and, once a deadline may have passed, swept.
-- At most this many ended leases are removed per call, the earliest
-- first: a gate where a huge number ended at once sheds them over several
-- calls, none of which blocks Redis for long. Until then X stays at or
-- before now, so the next call looks again; an ended lease still counts
-- as held (its permits are not granted again), which is safe, and
-- expire_one keeps it from being renewed, released or picked up.
local EXPIRE_STEP = 1000

function F.expire()
  if S.inline then
    -- Inline: every holder is in hand, so every ended lease goes now.
    S.held = F.inline_holders(raw[3])
    local kept, ended = {}, {}
    S.e, S.o, S.X = 0, 0, 0
    for _, x in ipairs(S.held) do
      if x[2] <= S.now then
        ended[#ended + 1] = x[1]
      else
        kept[#kept + 1] = x
        S.e = S.e + x[4] - 1
        if x[3] ~= 0 then S.o = S.o + 1 end
        if S.X == 0 or x[2] < S.X then S.X = x[2] end
      end
    end
    S.held, S.holders = kept, #kept
    if #ended > 0 then
      S.h_changed, S.freed = true, true
      for _, id in ipairs(ended) do F.forget_label(id) end
      S.x = S.x + #ended
    end
  -- H is exact while h exists, and no lease ends before X: until then
  -- there is nothing to expire and h need not be read. (h can only have
  -- expired whole after its last lease ended, which X <= now reveals.)
  elseif S.H > 0 and S.X > S.now then
    S.holders = S.H
    S.h_fresh = false
  elseif S.H > 0 then
    local ended = {}
    local earliest = 0
    if S.H <= SMALL then
      local all = redis.call('ZRANGE', S.KH, 0, -1, 'WITHSCORES')
      for i = 1, #all, 2 do
        local expires = tonumber(all[i + 1])
        if expires <= S.now then
          ended[#ended + 1] = all[i]
        elseif earliest == 0 or expires < earliest then
          earliest = expires
        end
      end
      S.holders = #all / 2
    else
      local due = redis.call('ZRANGEBYSCORE', S.KH, '-inf', S.now, 'WITHSCORES', 'LIMIT', 0, EXPIRE_STEP + 1)
      for i = 1, math.min(#due, 2 * EXPIRE_STEP), 2 do ended[#ended + 1] = due[i] end
      S.holders = redis.call('ZCARD', S.KH)
      if #due > 2 * EXPIRE_STEP then
        -- More ended than one call removes: the rest from this one on.
        earliest = tonumber(due[#due])
      else
        local first = redis.call('ZRANGEBYSCORE', S.KH, '(' .. S.now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        if first[2] then earliest = tonumber(first[2]) end
      end
    end
    S.X = earliest
    if S.holders > 0 then S.h_fresh = false end
    if #ended > 0 then
      for _, id in ipairs(ended) do F.remove_holder(id) end
      S.x = S.x + #ended
    end
  end
  if S.holders == 0 then
    -- Nothing holds: side counters left by a key that expired whole are stale.
    S.e, S.o, S.X = 0, 0, 0
  end
  if S.W > 0 then
    -- W is exact while q exists; q can only have expired whole once every
    -- deadline in it passed, which z <= now reveals, so count only then.
    S.waiting = S.W
    if S.z <= S.now then
      S.waiting = redis.call('ZCARD', S.KQ)
      if S.waiting > 0 then F.sweep() end
    end
    S.q_fresh = S.waiting == 0
  end
  if S.waiting == 0 then S.n, S.z, S.Y, S.Q = 0, 0, '0', 0 end
  -- Nobody holds or waits: a label count left by keys that expired is stale.
  if S.holders == 0 and S.waiting == 0 then S.a = 0 end
  S.p_fresh = S.waiting == 0 and F.holder_side() == 0 and S.a == 0
end
