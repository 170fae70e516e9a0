--- @include "general_holders.lua"
--- @needs S, F
--- @defines SWEEP_ALL, SWEEP_STEP, F.set_deadline, F.drop_ticket, F.drop_stale, F.sweep, F.line_moved, F.eta
--- @needs F.forget_label, F.note_side_data
-- general_line.lua: the general path's line (q, with each ticket's
-- deadline in p): tickets' deadlines, their removal, the sweep of stale
-- tickets, and the line's pace (for the estimated wait).
local SWEEP_ALL, SWEEP_STEP = 512, 256

function F.set_deadline(id, deadline)
  redis.call('HSET', S.KP, 'd:' .. id, deadline)
  if S.z == 0 or deadline < S.z then S.z = deadline end
  -- A pass under way may not reach this field: count it in the pass.
  if S.Y ~= '0' and (S.Q == 0 or deadline < S.Q) then S.Q = deadline end
  if deadline > S.w_top then S.w_top = deadline end
end

function F.drop_ticket(id)
  if redis.call('ZREM', S.KQ, id) == 0 then return false end
  if redis.call('HDEL', S.KP, 'd:' .. id, 'k:' .. id) == 2 then S.n = S.n - 1 end
  F.forget_label(id)
  S.waiting = S.waiting - 1
  if S.waiting == 0 then S.q_fresh = true end
  F.note_side_data()
  return true
end

-- Drops the tickets in `all` (field, value, ...) whose deadline passed;
-- returns the earliest deadline left among them (0: none).
function F.drop_stale(all)
  local earliest = 0
  for i = 1, #all, 2 do
    local field = all[i]
    if string.sub(field, 1, 2) == 'd:' then
      local d = tonumber(all[i + 1])
      if d <= S.now then
        F.drop_ticket(string.sub(field, 3))
      elseif earliest == 0 or d < earliest then
        earliest = d
      end
    end
  end
  return earliest
end

-- Drops tickets whose deadline passed, and learns the earliest left: all
-- at once for a short line, one bounded step of a pass for a long one.
function F.sweep()
  if S.waiting <= SWEEP_ALL and S.Y == '0' then
    S.z = F.drop_stale(redis.call('HGETALL', S.KP))
    return
  end
  local step = redis.call('HSCAN', S.KP, S.Y, 'COUNT', SWEEP_STEP)
  local earliest = F.drop_stale(step[2])
  if earliest > 0 and (S.Q == 0 or earliest < S.Q) then S.Q = earliest end
  S.Y = step[1]
  if S.Y == '0' then
    -- The pass is over: every deadline still in p is at least MQ.
    S.z, S.Q = S.Q, 0
  end
end

-- Records a grant from the line now, for the estimated wait (as
-- GateState::line_moved in src/gate/memory.rs). Departures with
-- nobody in line do not count: an idle gate's gaps say nothing of a
-- line's pace (and so a release on a gate with no line writes nothing
-- for it: see lone_leave.lua).
function F.line_moved()
  --- @inline "line_pace.lua" r=S.r, l=S.l, now=S.now
  S.l = S.now
end

-- A waiter's estimated wait, -1 until the line's first gap was measured (as
-- GateState::eta in src/gate/memory.rs).
function F.eta(position)
  if S.r == nil then return -1 end
  return position * S.r
end
