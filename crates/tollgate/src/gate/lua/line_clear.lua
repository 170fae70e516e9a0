--- @needs KM, KP, KQ, now, S, note_side_data
--- @defines clear_line
-- line_clear.lua: after general.lua, for admin.lua's reset and
-- set_admission.lua's door: drops every ticket in line in one step
-- (holders are not touched) and writes its time to m's C, so a waiter
-- told its ticket is gone can learn whether a reset took it. It costs
-- O(line), in chunks of CLEAR_STEP so no call carries more than that many
-- arguments. Returns how many tickets were dropped.
local function clear_line()
  local CLEAR_STEP, dropped = 1000, 0
  -- Until q is read empty, whatever the counters say (W is 0 only when
  -- q surely is).
  local ids = {}
  if S.waiting > 0 then ids = redis.call('ZRANGE', KQ, 0, CLEAR_STEP - 1) end
  while #ids > 0 do
    local side, labels = {}, {}
    for i, id in ipairs(ids) do
      side[2 * i - 1], side[2 * i] = 'd:' .. id, 'k:' .. id
      labels[i] = 'L:' .. id
    end
    redis.call('HDEL', KP, unpack(side))
    if S.a > 0 then S.a = S.a - redis.call('HDEL', KP, unpack(labels)) end
    redis.call('ZREMRANGEBYRANK', KQ, 0, #ids - 1)
    dropped = dropped + #ids
    ids = redis.call('ZRANGE', KQ, 0, CLEAR_STEP - 1)
  end
  -- Nobody waits: no multi-permit waiter, no deadline, no sweep under way.
  -- (A draw under way goes with its tickets.)
  S.waiting, S.n, S.z, S.Y, S.Q, S.q_fresh, S.B = 0, 0, 0, '0', 0, true, 0
  note_side_data()
  redis.call('HSET', KM, 'C', now)
  S.wrote_meta = true
  return dropped
end
