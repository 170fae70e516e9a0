--- @include "queue.lua"
-- claim.lua: a claim and the acks that come with it (jobs.lua's `claim`
-- operation): the plain queue's one pop, and a fair queue's turns among
-- its groups under its limits (jobs/fair.rs is the reference). jobs.lua
-- includes it first; it includes queue.lua.

-- Claims up to `max` due jobs: {1, n, then id, payload, attempt, fence,
-- deadline, group ('' the default) per job}, or {0, next due ms or -1,
-- now ms}. When more jobs
-- became ready than this claim takes, other consumers are woken for them.
-- `mv`: m's paused and v, read by the caller before anything else (so
-- that no event of this call needs a read of its own).
-- Fair: up to `max` ready jobs, one per group in turn, skipping (into h)
-- the groups a limit holds (jobs/fair.rs: `take`, one job at a time; the
-- same done here a round at a time: as many groups popped as jobs may
-- still go, each served once, then put back in line in that order).
-- Returns the jobs' ids, their groups, and the queue rate's arrival time
-- (if it has a rate).
-- Without a group limit or a queue rate, nothing holds a group back
-- within one claim: the turns are played out in Lua first (who takes how
-- many, in what order, each re-entry a turn as `take` gives it), then
-- each group's jobs are taken in one call.
local function free_claim(max, in_flight, L)
  local room = max
  if L.cc then room = math.min(room, L.cc - in_flight) end
  if room <= 0 then return {}, {} end
  local popped = redis.call('ZPOPMIN', KG, room)
  if #popped == 0 then return {}, {} end
  local line, head = {}, 1
  for i = 1, #popped, 2 do line[#line + 1] = popped[i] end
  local ready = redis.call('ZMSCORE', KB, unpack(line))
  local left, takes, picks, turns, order = {}, {}, {}, {}, {}
  for i, g in ipairs(line) do
    left[g] = tonumber(ready[i]) or 0
    takes[g] = 0
    order[i] = g
  end
  while #picks < room and head <= #line do
    local g = line[head]
    head = head + 1
    picks[#picks + 1] = g
    takes[g] = takes[g] + 1
    left[g] = left[g] - 1
    if left[g] > 0 then
      line[#line + 1] = g
      turns[g] = next_turn()
    end
  end
  local taken, by_group, counts_taken = {}, {}, {}
  for i, g in ipairs(order) do counts_taken[i] = takes[g] end
  for i, mine in ipairs(take_ready(order, ready, counts_taken)) do by_group[order[i]] = mine end
  local ids, groups, next_of = {}, {}, {}
  for _, g in ipairs(picks) do
    local i = (next_of[g] or 0) + 1
    next_of[g] = i
    local id = by_group[g][i]
    if id then
      ids[#ids + 1] = id
      groups[#groups + 1] = g
      taken[#taken + 1] = id
    end
  end
  if #taken > 0 then redis.call('ZREM', KR, unpack(taken)) end
  local running = redis.call('HMGET', KU, unpack(order))
  local counts, runs, back = {}, {}, {}
  for i, g in ipairs(order) do
    counts[#counts + 1] = left[g]
    counts[#counts + 1] = g
    if takes[g] > 0 then
      runs[#runs + 1] = g
      runs[#runs + 1] = (tonumber(running[i]) or 0) + takes[g]
    end
  end
  -- Still in line: in the order they re-entered, at the turns they got.
  for j = head, #line do
    local g = line[j]
    if left[g] > 0 and turns[g] then
      back[#back + 1] = turns[g]
      back[#back + 1] = g
      turns[g] = nil
    end
  end
  redis.call('ZADD', KB, unpack(counts))
  if #runs > 0 then redis.call('HSET', KU, PAD_FIELD, PAD, unpack(runs)) end
  if #back > 0 then redis.call('ZADD', KG, unpack(back)) end
  return ids, groups
end

local function fair_claim(max)
  local L = queue_limits()
  local in_flight = L.cc and redis.call('ZCARD', KF) or 0
  if not L.rn and not L.gc and not L.gn and L.o == 0 then
    local ids, groups = free_claim(max, in_flight, L)
    return ids, groups, nil
  end
  -- The queue rate's log, read once: its live count, then this call's.
  local qroom
  if L.rn then qroom = L.rn - redis.call('ZCARD', KQ) end
  local ids, groups = {}, {}
  while #ids < max do
    local room = max - #ids
    if L.cc then room = math.min(room, L.cc - in_flight) end
    if qroom then room = math.min(room, qroom) end
    if room <= 0 then break end
    local popped = redis.call('ZPOPMIN', KG, room)
    if #popped == 0 then break end
    local served, taken, back, held = {}, {}, {}, {}
    -- Each group's ready count, and its next job, read for the round at
    -- once (a group held back does not take it).
    local names = {}
    for i = 1, #popped, 2 do names[#names + 1] = popped[i] end
    local ready_of = redis.call('ZMSCORE', KB, unpack(names))
    local ready_at = {}
    for i, g in ipairs(names) do ready_at[g] = ready_of[i] end
    for i = 1, #popped, 2 do
      local g = popped[i]
      if qroom and qroom <= 0 then
        -- The queue's rate stops the round: the rest keep their turns.
        back[#back + 1] = popped[i + 1]
        back[#back + 1] = g
      else
        local _, n = limits_of(g)
        local until_ = held_until(g)
        if until_ then
          held[#held + 1] = until_
          held[#held + 1] = g
        else
          local id = take_ready({g}, {ready_at[g]}, {1})[1][1]
          if id then
            ids[#ids + 1] = id
            groups[#groups + 1] = g
            served[#served + 1] = g
            taken[#taken + 1] = id
            in_flight = in_flight + 1
            if qroom then
              qroom = qroom - 1
              pending_rate[KQ] = (pending_rate[KQ] or 0) + 1
            end
            if n then
              local key = KY .. ':' .. g
              pending_rate[key] = (pending_rate[key] or 0) + 1
            end
          end
        end
      end
    end
    if #back > 0 then redis.call('ZADD', KG, unpack(back)) end
    if #held > 0 then redis.call('ZADD', KH, unpack(held)) end
    if #served > 0 then
      redis.call('ZREM', KR, unpack(taken))
      local ready = {}
      for i, g in ipairs(served) do ready[i] = ready_at[g] end
      local running = redis.call('HMGET', KU, unpack(served))
      local counts, runs, again, again_running = {}, {}, {}, {}
      for i, g in ipairs(served) do
        local left, now_running = (tonumber(ready[i]) or 1) - 1, (tonumber(running[i]) or 0) + 1
        counts[#counts + 1] = left
        counts[#counts + 1] = g
        runs[#runs + 1] = g
        runs[#runs + 1] = now_running
        if left > 0 then
          again[#again + 1] = g
          again_running[#again_running + 1] = now_running
        end
      end
      redis.call('ZADD', KB, unpack(counts))
      redis.call('HSET', KU, PAD_FIELD, PAD, unpack(runs))
      if #again > 0 then place_many(again, again_running) end
    end
  end
  return ids, groups
end

-- Writes the jobs a fair claim let go into the rate logs it counted them
-- against (the queue's, their groups'), now that they have fences.
local function log_rates(ids_fences, groups)
  local L = queue_limits()
  local per, order = {}, {}
  local function add(key, p, fence)
    if not per[key] then
      per[key] = {p = p}
      order[#order + 1] = key
    end
    local items = per[key]
    items[#items + 1] = now
    items[#items + 1] = fence
  end
  for i, fence in ipairs(ids_fences) do
    if L.rn then add(KQ, L.rp, fence) end
    local _, n, p = limits_of(groups[i])
    if n then add(KY .. ':' .. groups[i], p, fence) end
  end
  for _, key in ipairs(order) do
    local items = per[key]
    chunked('ZADD', key, items)
    -- Trimmed to the period in force as it is written (fair.rs: `take`),
    -- and gone a day after its last job (the longest period).
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now - items.p)
    redis.call('PEXPIRE', key, 86400000 + 1000)
  end
  pending_rate = {}
end

local function claim(lease, max, mv)
  local readied = promote()
  -- Paused: due jobs are made ready, but none is handed out and nobody is
  -- woken for them (a resume wakes the consumers).
  if mv[1] then return {0, -1, now} end
  if readied > max then wake(readied - max) end
  local ids, groups = {}, {}
  if fair_on then
    ids, groups = fair_claim(max)
    if #ids < max and limited() and redis.call('ZCARD', KR) > 0 then count('lc') end
  else
    local popped = redis.call('ZPOPMIN', KR, max)
    for i = 1, #popped / 2 do ids[i] = popped[2 * i - 1] end
  end
  local n = #ids
  if n == 0 then return {0, next_due(), now} end
  local records = {}
  for i, id in ipairs(ids) do records[i] = record_of(id) end
  -- Each fence is above both the last one kept and server time (ms) x
  -- 1000, so fences keep growing whatever Redis forgot or took back (the
  -- queue lost, or an older f reloaded), as long as time goes forward;
  -- b moves with a jump, so claims = f - b. (As next_fence() in the
  -- gates' general_grant.lua and Queue::claim in memory.rs.)
  -- (A busy queue claims many times a millisecond: only the first of
  -- them jumps, so the counter's HINCRBY alone is the common case.)
  local f, floor = redis.call('HINCRBY', KM, 'f', n), now * 1000
  if f - n < floor then
    local b = (tonumber(redis.call('HGET', KM, 'b')) or 0) + floor - (f - n)
    f = floor + n
    redis.call('HSET', KM, 'f', string.format('%d', f), 'b', string.format('%d', b))
  end
  local deadline = now + lease
  local tried = redis.call('HMGET', KN, unpack(ids))
  local out, leases, fences, attempts = {1, 0}, {}, {}, {}
  for i = 1, n do
    local id, v = ids[i], records[i]
    if v then
      local fence = string.format('%d', f - n + i)
      local attempt = (tonumber(tried[i]) or 0) + 1
      local payload = string.sub(v, string.find(v, '\n', 1, true) + 1)
      leases[#leases + 1] = deadline
      leases[#leases + 1] = id
      fences[#fences + 1] = id
      -- Fair: l names the group, whose slot the job's end frees.
      fences[#fences + 1] = fair_on and fence .. ':' .. groups[i] or fence
      attempts[#attempts + 1] = id
      attempts[#attempts + 1] = attempt
      for _, x in ipairs({id, payload, attempt, fence, deadline, groups[i] or ''}) do out[#out + 1] = x end
      emit('claimed', id, 'a', attempt, 'f', fence)
    end
  end
  -- The rates counted these jobs: their logs take them, by fence.
  if fair_on and next(pending_rate) then
    local logged = {}
    for i = 1, n do logged[i] = string.format('%d', f - n + i) end
    log_rates(logged, groups)
  end
  if #leases == 0 then return {0, next_due(), now} end
  out[2] = #leases / 2
  redis.call('ZADD', KF, unpack(leases))
  redis.call('HSET', KL, PAD_FIELD, PAD, unpack(fences))
  redis.call('HSET', KN, PAD_FIELD, PAD, unpack(attempts))
  return out
end

-- Acks the deliveries named by the id, fence pairs in ARGV from `from`:
-- returns 1 per pair whose delivery it was (now acked), else 0. With
-- keep_n > 0 acked jobs are kept as completed: at most keep_n of them, none
-- older than keep_ms.
-- Also returns how many consumers to wake for slots the acks freed.
local function ack_all(from, keep_n, keep_ms)
  local ids, flags, done, seen, freed = {}, {}, {}, {}, {}
  for i = from, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
  if #ids == 0 then return flags, 0 end
  local held = redis.call('HMGET', KL, unpack(ids))
  for i, id in ipairs(ids) do
    flags[i] = 0
    if held[i] and not seen[id] then
      local fence, g = held_value(held[i])
      if fence == ARGV[from + 2 * i - 1] then
        seen[id] = true
        flags[i] = 1
        done[#done + 1] = id
        if g then freed[#freed + 1] = g end
      end
    end
  end
  if #done == 0 then return flags, 0 end
  local before = #freed > 0 and running_before()
  redis.call('ZREM', KF, unpack(done))
  redis.call('HDEL', KL, unpack(done))
  redis.call('HDEL', KN, unpack(done))
  local woke = 0
  if #freed > 0 then woke = fair_release_many(freed) + slot_wakes(before) end
  count('acked', #done)
  for _, id in ipairs(done) do emit('acked', id) end
  if keep_n <= 0 then
    for _, id in ipairs(done) do redis.call('HDEL', bucket(id), id) end
    return flags, woke
  end
  local kept = {}
  for _, id in ipairs(done) do
    kept[#kept + 1] = now
    kept[#kept + 1] = id
  end
  redis.call('ZADD', KC, unpack(kept))
  local over = redis.call('ZCARD', KC) - keep_n
  if over > 0 then
    local old = redis.call('ZPOPMIN', KC, over)
    for i = 1, #old, 2 do redis.call('HDEL', bucket(old[i]), old[i]) end
  end
  local stale = redis.call('ZRANGEBYSCORE', KC, '-inf', now - keep_ms, 'LIMIT', 0, BATCH)
  for _, old in ipairs(stale) do
    redis.call('ZREM', KC, old)
    redis.call('HDEL', bucket(old), old)
  end
  return flags, woke
end
