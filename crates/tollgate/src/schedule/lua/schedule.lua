--- @include "queue.lua"
-- schedule.lua: the schedules that push to one job queue, kept with the
-- queue (same hash tag) so that claiming a tick and pushing its job are
-- one step. Runs after queue.lua (the queue's keys and shared steps), the
-- operation in ARGV[1]. src/schedule/memory.rs is the same model
-- in Rust; tests/schedules_agree.rs (random operations) and the
-- conformance suite tests/schedules.rs hold one to the other.
--
-- The client computes ticks (cron and time zones live in Rust); this
-- script only compares and sets. Keys, beside the queue's (not declared,
-- same hash tag):
--   S  HASH  name -> "<rev>,<next>,<from>,<paused>\n<timing>\n<definition>\n<payload>"
--            rev counts changes; next is the tick to fire next (ms), 0 for
--            "the first tick at or after from", -1 for none left; from is
--            the store time (ms) the schedule's timing last (re)started (0
--            once next is a tick: only next = 0 reads it);
--            timing and definition are the client's text, compared as is
--   Z  ZSET  name -> next, for every schedule in S not paused with next >= 0
--   H  HASH  name -> the last HISTORY ticks fired, oldest first, by comma:
--            "<tick ms>" or "manual-<ms>" (the job id is "<name>@" that)
-- Invariant: a tick is fired only by a `fire` naming the schedule's rev
-- and next as stored, with every tick due by the store's clock within
-- LOOKAHEAD (its job then waits, delayed, until the tick), and that
-- same step moves next past it: however many clients fire, each tick
-- pushes its job once (and the job id "<name>@<tick>" dedupes besides).
local SB = string.sub(KM, 1, -2)
local KS, KZ, KH = SB .. 'S', SB .. 'Z', SB .. 'H'
local HISTORY = 10
-- A tick may be fired this long before it is due (ms): its job goes in
-- as a delayed job due at the tick, so the firing is never on the tick's
-- critical path. Same as LOOKAHEAD_MS in Rust.
local LOOKAHEAD = 1000

local function read(name)
  local v = redis.call('HGET', KS, name)
  if not v then return nil end
  local nl = string.find(v, '\n', 1, true)
  local rev, nxt, from, paused = string.match(string.sub(v, 1, nl - 1), '^(%d+),(%-?%d+),(%d+),(%d)$')
  return {rev = tonumber(rev), next = tonumber(nxt), from = tonumber(from), paused = paused == '1',
          rest = string.sub(v, nl + 1)}
end

local function write(name, s)
  redis.call('HSET', KS, name,
    string.format('%d,%d,%d,%d\n', s.rev, s.next, s.from, s.paused and 1 or 0) .. s.rest)
  if s.paused or s.next < 0 then
    redis.call('ZREM', KZ, name)
  else
    redis.call('ZADD', KZ, s.next, name)
  end
end

-- The job payload of a schedule: its text after timing and definition.
local function payload_of(s)
  local a = string.find(s.rest, '\n', 1, true)
  local b = string.find(s.rest, '\n', a + 1, true)
  return string.sub(s.rest, b + 1)
end

-- Appends fired ticks to the history, keeping the last HISTORY.
local function remember(name, entries)
  local list = {}
  local h = redis.call('HGET', KH, name)
  if h then
    for e in string.gmatch(h, '[^,]+') do list[#list + 1] = e end
  end
  for _, e in ipairs(entries) do list[#list + 1] = e end
  redis.call('HSET', KH, name, table.concat(list, ',', math.max(1, #list - HISTORY + 1)))
end

-- Takes back the jobs this schedule pushed ahead for ticks not yet due
-- (still delayed), and drops them from the history, so that a pause, a
-- change or a delete applies to every tick not yet due. Returns the
-- earliest tick taken back, or nil.
local function withdraw(name)
  local h = redis.call('HGET', KH, name)
  if not h then return nil end
  local kept, earliest = {}, nil
  for e in string.gmatch(h, '[^,]+') do
    local tick = tonumber(e)
    local id = name .. '@' .. e
    if tick and tick > now and redis.call('ZREM', KW, id) == 1 then
      forget(id)
      if not earliest or tick < earliest then earliest = tick end
    else
      kept[#kept + 1] = e
    end
  end
  if earliest then
    if #kept > 0 then
      redis.call('HSET', KH, name, table.concat(kept, ','))
    else
      redis.call('HDEL', KH, name)
    end
  end
  return earliest
end

-- Jobs pushed by one call, placed together at its end: the ready ones in
-- one ZADD and one wake-up (a fire of many schedules is one burst).
-- (score, id) pairs, and each job's group.
local ready_batch, ready_groups = {}, {}

local function place_ready()
  for i = 1, #ready_batch, 1000 do
    redis.call('ZADD', KR, unpack(ready_batch, i, math.min(i + 999, #ready_batch)))
  end
  -- Fair: in their groups' sets too, in push order.
  if #ready_batch > 0 and is_fair() then
    for i = 1, #ready_batch, 2000 do
      local jobs = {}
      for j = i, math.min(i + 1999, #ready_batch), 2 do
        jobs[#jobs + 1] = {ready_groups[(j + 1) / 2], ready_batch[j], ready_batch[j + 1]}
      end
      fair_ready_many(jobs)
    end
  end
  -- (Also the turn a job's group turning the queue fair gave the default
  -- group, when every job of the call was delayed or a duplicate.)
  flush_turn()
  if #ready_batch > 0 then wake(#ready_batch / 2) end
  ready_batch, ready_groups = {}, {}
end

-- Pushes job `id` with sequence number `seq` unless one with that id
-- exists (then counted as a kept duplicate, as a push counts it); the job
-- options are ARGV[o .. o + 5] (the last the group: '' the default, any
-- other turns the queue fair first, as a push's does). Returns whether it
-- was new.
local function push_new(id, seq, o, payload, run_at)
  local group = ARGV[o + 5]
  if group ~= '' then turn_fair() end
  local record = head_of(seq, ARGV[o], ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], group) .. payload
  if redis.call('HSETNX', bucket(id), id, record) == 0 then
    count('replaced')
    return false
  end
  local m = {prio = tonumber(ARGV[o]), seq = seq, group = group}
  if run_at <= now then
    ready_batch[#ready_batch + 1] = ready_score(m)
    ready_batch[#ready_batch + 1] = id
    ready_groups[#ready_groups + 1] = group
  else
    line_up(id, m, run_at)
  end
  return true
end

-- Why this queue takes no job: -1 a partition of a replaced layout,
-- -2 the base of a partitioned queue (its jobs live in the partitions).
local function refused()
  if tonumber(redis.call('HGET', KM, 'partitions') or '1') > 1 then return -2 end
  if redis.call('HEXISTS', KM, 'retired') == 1 then return -1 end
  return nil
end

if op == 'put' then
  -- ARGV: 4 name, 5 timing, 6 definition, 7 payload, 8 paused if new
  --       (0|1), 9 start ms. Reply: {1, rev} created, {2, rev} changed,
  --       {3, rev} unchanged, {-1 | -2} refused (see refused()).
  -- A changed timing restarts from max(now, start); a paused schedule
  -- stays paused and a running one running.
  local why = refused()
  if why then return {why} end
  local name, rest = ARGV[4], ARGV[5] .. '\n' .. ARGV[6] .. '\n' .. ARGV[7]
  local from = math.max(now, tonumber(ARGV[9]))
  local s = read(name)
  if not s then
    write(name, {rev = 1, next = 0, from = from, paused = ARGV[8] == '1', rest = rest})
    -- A queue with a schedule is kept (queue.lua's settle).
    revive()
    return {1, 1}
  end
  if s.rest == rest then return {3, s.rev} end
  -- Ticks pushed ahead are pushed again with the change.
  local earliest = withdraw(name)
  if string.sub(s.rest, 1, string.find(s.rest, '\n', 1, true) - 1) ~= ARGV[5] then
    s.next, s.from = 0, from
  elseif earliest then
    s.next = earliest
  end
  s.rev, s.rest = s.rev + 1, rest
  write(name, s)
  return {2, s.rev}
end

if op == 'due' then
  -- ARGV: 4 the most schedules to answer. Reply: {now, the lowest next
  -- in Z, or -1 if none (all paused or ended), or -2 if the queue has no
  -- schedule at all, then name, record for each schedule due by now plus
  -- LOOKAHEAD}.
  local names = redis.call('ZRANGEBYSCORE', KZ, '-inf', now + LOOKAHEAD, 'LIMIT', 0, tonumber(ARGV[4]))
  local first = redis.call('ZRANGE', KZ, 0, 0, 'WITHSCORES')
  local soonest = tonumber(first[2])
  if not soonest then soonest = redis.call('EXISTS', KS) == 1 and -1 or -2 end
  local out = {now, soonest}
  if #names > 0 then
    local records = redis.call('HMGET', KS, unpack(names))
    for i, name in ipairs(names) do
      if records[i] then
        out[#out + 1] = name
        out[#out + 1] = records[i]
      end
    end
  end
  return out
end

if op == 'fire' then
  -- ARGV: 4 schedule count, then per schedule from a: name, rev, the next
  --       it expects, the next to store, the job's prio, max attempts,
  --       backoff kind, base ms, max ms, group, tick count k, then k pairs
  --       of tick ms and run-at ms.
  -- Reply: {now, then two per schedule: status, jobs pushed}: status 1
  --        fired, 0 stale (rev or next changed, paused, gone, or a tick
  --        more than LOOKAHEAD ahead: nothing done), -1 | -2 the queue
  --        refused (see refused(); the schedule still moves on, nothing
  --        is pushed). A job is due at its run-at, so a tick fired ahead
  --        waits in the delayed set until then.
  local why = refused()
  -- First which schedules are still as the client read them, then one
  -- sequence range for all their ticks (s counts pushes), then the pushes.
  -- A name twice in one call: only its first entry may fire.
  local checked, total, a, named = {}, 0, 5, {}
  for i = 1, tonumber(ARGV[4]) do
    local name, k = ARGV[a], tonumber(ARGV[a + 10])
    local s = not named[name] and read(name)
    named[name] = true
    local ok = s and not s.paused and s.rev == tonumber(ARGV[a + 1]) and s.next == tonumber(ARGV[a + 2])
    for j = 0, k - 1 do
      if tonumber(ARGV[a + 11 + 2 * j]) > now + LOOKAHEAD then ok = false end
    end
    checked[i] = {a = a, k = k, s = ok and s or nil}
    if ok then total = total + k end
    a = a + 11 + 2 * k
  end
  local seq = 0
  -- (Pushing makes the queue one to keep, as push does: a watch may have
  -- set m to expire while the queue held nothing.)
  if total > 0 and not why then
    revive()
    seq = redis.call('HINCRBY', KM, 's', total) - total
  end
  local out = {now}
  for _, c in ipairs(checked) do
    local a, k, s, pushed = c.a, c.k, c.s, 0
    if s then
      local name = ARGV[a]
      if not why and k > 0 then
        local payload, fired = payload_of(s), {}
        for j = 0, k - 1 do
          local tick = ARGV[a + 11 + 2 * j]
          seq = seq + 1
          if push_new(name .. '@' .. tick, seq, a + 4, payload, tonumber(ARGV[a + 12 + 2 * j])) then
            pushed = pushed + 1
          end
          fired[#fired + 1] = tick
        end
        remember(name, fired)
      end
      -- from only serves next = 0: stored as 0 after, to keep it short.
      s.next, s.from = tonumber(ARGV[a + 3]), 0
      write(name, s)
    end
    out[#out + 1] = s and (why or 1) or 0
    out[#out + 1] = pushed
  end
  place_ready()
  return out
end

if op == 'trigger' then
  -- ARGV: 4 name, 5 rev, 6..11 the job's prio, max attempts, backoff
  --       kind, base ms, max ms, group. Pushes an extra job "<name>@manual-<ms>"
  --       due now; the schedule's next does not move.
  -- Reply: {1, job id}, {0} stale (rev changed or gone), {-1 | -2}.
  local why = refused()
  if why then return {why} end
  local name = ARGV[4]
  local s = read(name)
  if not s or s.rev ~= tonumber(ARGV[5]) then return {0} end
  local t = now
  while redis.call('HEXISTS', bucket(name .. '@manual-' .. t), name .. '@manual-' .. t) == 1 do t = t + 1 end
  local id = name .. '@manual-' .. t
  revive()
  push_new(id, redis.call('HINCRBY', KM, 's', 1), 6, payload_of(s), now)
  place_ready()
  remember(name, {'manual-' .. t})
  return {1, id}
end

if op == 'pause' or op == 'resume' then
  -- ARGV: 4 name. Reply: {1} done (or already so), {0} no such schedule.
  -- A resumed schedule starts again from now: the ticks of the pause are
  -- not fired later.
  local s = read(ARGV[4])
  if not s then return {0} end
  local pause = op == 'pause'
  if s.paused ~= pause then
    if pause then withdraw(ARGV[4]) end
    s.paused, s.rev = pause, s.rev + 1
    if not pause then s.next, s.from = 0, now end
    write(ARGV[4], s)
  end
  return {1}
end

if op == 'delete' then
  -- ARGV: 4 name. Reply: 1 deleted, 0 no such schedule. The jobs of
  -- ticks not yet due go with it; the others stay.
  withdraw(ARGV[4])
  redis.call('ZREM', KZ, ARGV[4])
  redis.call('HDEL', KH, ARGV[4])
  local deleted = redis.call('HDEL', KS, ARGV[4])
  settle()
  return deleted
end

if op == 'get' then
  -- ARGV: 4 name. Reply: {record, history} or {} if there is none.
  local v = redis.call('HGET', KS, ARGV[4])
  if not v then return {} end
  return {v, redis.call('HGET', KH, ARGV[4]) or ''}
end

if op == 'list' then
  -- ARGV: 4 cursor, 5 count hint. Reply: {next cursor ('0' at the end),
  -- then name, record, history per schedule}.
  local scan = redis.call('HSCAN', KS, ARGV[4], 'COUNT', tonumber(ARGV[5]))
  local out, rows = {scan[1]}, scan[2]
  for i = 1, #rows, 2 do
    out[#out + 1] = rows[i]
    out[#out + 1] = rows[i + 1]
    out[#out + 1] = redis.call('HGET', KH, rows[i]) or ''
  end
  return out
end

return redis.error_reply('unknown schedule operation ' .. tostring(op))
