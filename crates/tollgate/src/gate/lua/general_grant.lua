--- @include "general_line.lua"
--- @needs S, F, INLINE, base
--- @defines F.next_fence, F.may_admit, F.admitted, F.promote
--- @needs F.add_holder, F.drop_ticket, F.line_moved, F.note_side_data, F.permits_of, F.used
-- general_grant.lua: grants: the next fence, admission control, and the
-- general path's second step, promotion (free permits handed to the head
-- of the line while the head fits).
function F.next_fence()
  -- Every fence is above both the last one kept (f) and server time x
  -- 1000, so fences keep growing whatever Redis forgot or took back (the
  -- meta hash lost, or an older f reloaded from a snapshot, an AOF with
  -- its tail lost or a replica that lagged), as long as time goes
  -- forward and no gate grants 1,000 leases a millisecond. b moves with
  -- a jump, so f - b still counts grants. The same rule as
  -- GateState::grant in src/gate/memory.rs (and the fast paths',
  -- and jobs.lua's claim).
  local floor = S.now * 1000
  if S.f < floor then S.f, S.b = floor, S.b + floor - S.f end
  S.f = S.f + 1
  return S.f
end

-- Whether admission control lets one more in now, and spending it.
function F.may_admit()
  return S.P ~= 1 and S.I == 0 and (S.R == 0 or S.A <= S.now)
end
function F.admitted()
  if S.R > 0 then S.A = math.max(S.A, S.now) + S.R end
end

-- Random queueing's generator (as PICK_MOD and PICK_MUL in
-- src/gate/types.rs): O picks the ticket at index O mod the line's
-- length, and becomes O * PICK_MUL mod PICK_MOD with each grant from the
-- line (below 2^47: exact).
local PICK_MOD, PICK_MUL = 2147483647, 48271

-- Grants free permits to the head of the line while the head fits; with
-- random queueing (O), to the ticket picked, which stands for the head.
function F.promote()
  if S.cap == nil or S.waiting == 0 then return end
  local handed = {}
  while S.waiting > 0 do
    -- With only single-permit tickets in line, a full gate needs no look,
    -- and a gate with room takes the head off the line in one call.
    local head, k, popped
    local at = S.O > 0 and S.O % S.waiting or 0
    if S.n == 0 then
      if F.used() >= S.cap or not F.may_admit() then break end
      if at == 0 then
        head, k, popped = redis.call('ZPOPMIN', S.KQ)[1], 1, true
      else
        head, k = redis.call('ZRANGE', S.KQ, at, at)[1], 1
      end
    else
      head = redis.call('ZRANGE', S.KQ, at, at)[1]
      if head then k = F.permits_of(head, true) end
    end
    if not head then break end
    if k > S.cap then
      -- Capacity was lowered below what this ticket needs: it can never be
      -- served and must not block the line behind it.
      F.drop_ticket(head)
    elseif F.used() + k > S.cap or not F.may_admit() then
      break
    else
      F.admitted()
      if S.O > 0 then S.O = S.O * PICK_MUL % PICK_MOD end
      -- The hand-off lives only until the waiter's heartbeat deadline: a
      -- vanished waiter gives it back within its grace, not a whole TTL.
      local deadline = tonumber(redis.call('HGET', S.KP, 'd:' .. head)) or S.now
      if not popped then redis.call('ZREM', S.KQ, head) end
      S.waiting = S.waiting - 1
      if S.waiting == 0 then S.q_fresh = true end
      if k > 1 then S.n = S.n - 1 end
      local f = F.next_fence()
      -- The ticket's side data goes: its deadline, and (inline, where the
      -- holder keeps them in h) its permits.
      if k > 1 and (S.holders > 0 and S.inline or S.holders == 0 and S.cap <= INLINE) then
        redis.call('HDEL', S.KP, 'd:' .. head, 'k:' .. head)
      else
        redis.call('HDEL', S.KP, 'd:' .. head)
      end
      F.add_holder(head, deadline, -f, k)
      -- (The last ticket's side data gone, Redis deleted p and its TTL: a
      -- ticket queued later in this call makes it again, without one.)
      F.note_side_data()
      F.line_moved()
      handed[#handed + 1] = head .. ':' .. string.format('%d', f)
      S.handed[#S.handed + 1] = handed[#handed]
    end
  end
  if #handed > 0 then
    redis.call('PUBLISH', base .. 'n', table.concat(handed, ' '))
  end
end
