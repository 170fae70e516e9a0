--- @include "claim.lua"
-- jobs.lua: every job-queue operation, chosen by ARGV[1]. Runs after
-- queue.lua (the keys, their layout and the steps every operation on a
-- queue shares) and claim.lua (a claim), which its first line includes.

-- An error text in an event is cut to this many bytes.
local EVENT_ERROR_BYTES = 200

if op == 'push' then
  -- ARGV: 4 job count k, then 11 per job from a = 5 + 11 * j: id, payload,
  --       delay ms (-1: use the next), run-at ms, prio, max attempts,
  --       backoff kind, base ms, max ms, on duplicate ('keep' | 'replace'),
  --       group ('' the default; any other turns the queue fair first)
  -- Reply: two per job: {1, run_at} pushed; {2, 0} kept the existing job;
  --        {3, run_at} replaced; {4, 0} in flight, dead or kept as
  --        completed: not replaced
  -- A partition of a layout that was repartitioned away takes no job.
  local mv = redis.call('HMGET', KM, 'retired', 'v', 'G', unpack(FAIR_FIELDS))
  watch_until = tonumber(mv[2]) or 0
  fair_fields_at(mv, 4)
  if mv[1] then
    return redis.error_reply('RETIRED this queue belongs to a partition layout that was replaced; ' ..
      'use the partition count in force')
  end
  revive(mv[3] ~= false)
  local k = tonumber(ARGV[4])
  for j = 0, k - 1 do
    if ARGV[15 + 11 * j] ~= '' then
      turn_fair()
      break
    end
  end
  -- s counts pushes and replacements (pushed = s - replaced); a kept
  -- duplicate leaves a gap in it, which is harmless.
  local seq0 = redis.call('HINCRBY', KM, 's', k) - k
  local out, ready, delayed, delayed_ids, pending, grouped = {}, {}, {}, {}, {}, {}
  local replaced = 0
  -- Keep-mode jobs are placed together at the end (one ZADD each for
  -- ready and delayed; fair, each group's ready jobs in one call, groups
  -- new in line in push order); a replace of one of them first places
  -- them all (fair, any replace does: its group's turn comes after
  -- theirs, as in push order).
  local function place_pending()
    if #ready > 0 then
      redis.call('ZADD', KR, unpack(ready))
      if fair_on then fair_ready_many(grouped) end
      wake(#ready / 2)
    end
    if #delayed > 0 then
      redis.call('ZADD', KW, unpack(delayed))
      if delayed_ids[redis.call('ZRANGE', KW, 0, 0)[1]] then wake() end
    end
    ready, delayed, delayed_ids, pending, grouped = {}, {}, {}, {}, {}
  end
  for j = 0, k - 1 do
    local a = 5 + 11 * j
    local id, seq = ARGV[a], seq0 + j + 1
    local delay, run_at = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    if delay >= 0 then run_at = now + delay end
    local m = {prio = tonumber(ARGV[a + 4]), seq = seq, group = ARGV[a + 10]}
    local record = head_of(seq, ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 10]) ..
      ARGV[a + 1]
    if ARGV[a + 9] ~= 'replace' then
      -- Dedupe: one call both checks and writes. A later duplicate in the
      -- same batch is kept out the same way.
      if redis.call('HSETNX', bucket(id), id, record) == 1 then
        pending[id] = true
        if run_at <= now then
          ready[#ready + 1] = ready_score(m)
          ready[#ready + 1] = id
          if fair_on then grouped[#grouped + 1] = {m.group, ready[#ready - 1], id} end
        else
          delayed[#delayed + 1] = run_at
          delayed[#delayed + 1] = id
          delayed_ids[id] = true
        end
        out[#out + 1] = 1
        out[#out + 1] = run_at
        emit('pushed', id, 'r', run_at)
      else
        replaced = replaced + 1
        out[#out + 1] = 2
        out[#out + 1] = 0
      end
    elseif redis.call('HEXISTS', bucket(id), id) == 1
      and (redis.call('ZSCORE', KF, id) or redis.call('ZSCORE', KX, id) or redis.call('ZSCORE', KC, id)) then
      replaced = replaced + 1
      out[#out + 1] = 4
      out[#out + 1] = 0
    else
      -- Placed at once: a later job of this batch may replace it again.
      if pending[id] or fair_on then place_pending() end
      local outcome = 1
      if ready_rem(id) or redis.call('ZREM', KW, id) > 0 then
        outcome = 3
        replaced = replaced + 1
      end
      redis.call('HSET', bucket(id), id, record)
      line_up(id, m, run_at)
      out[#out + 1] = outcome
      out[#out + 1] = run_at
      emit('pushed', id, 'r', run_at)
    end
  end
  if replaced > 0 then count('replaced', replaced) end
  place_pending()
  flush_turn()
  return out
end

if op == 'claim' then
  -- Acks deliveries, then claims up to max jobs, in one step.
  -- ARGV: 4 lease ms, 5 max jobs to claim (0: only ack), 6 keep count (0:
  --       delete acked jobs), 7 keep ms, then id, fence pairs to ack.
  -- Reply: {k, then 1/0 per ack (acked, or not that delivery's)}, then the
  --        claim's reply (with max 0: {0, -1, now}).
  local max = tonumber(ARGV[5])
  local mv
  if max > 0 then
    mv = redis.call('HMGET', KM, 'paused', 'v', unpack(FAIR_FIELDS))
    watch_until = tonumber(mv[2]) or 0
    fair_fields_at(mv, 3)
  end
  local out, woke = ack_all(8, tonumber(ARGV[6]), tonumber(ARGV[7]))
  table.insert(out, 1, #out)
  local r = {0, -1, now}
  if max > 0 then r = claim(tonumber(ARGV[4]), max, mv) end
  -- This claim takes what the acks freed first: others are woken only
  -- for what it leaves.
  if r[1] == 1 then woke = woke - r[2] end
  if woke > 0 then wake(woke) end
  flush_turn()
  -- Nothing claimed and nothing delayed or in flight: maybe nothing left.
  if r[1] == 0 and r[2] == -1 then settle() end
  for _, x in ipairs(r) do out[#out + 1] = x end
  return out
end

if op == 'nack' then
  -- ARGV: 4 id, 5 fence, 6 delay ms (-1: the job's backoff), 7 jitter
  -- (0..1), 8 error text ('' none), kept if the job dies. Reply:
  -- {1, run_at} retried later, {2} dead, {0} not ours.
  local id = ARGV[4]
  local v = redis.call('HGET', KL, id)
  if not v then return {0} end
  local fence, g = held_value(v)
  if fence ~= ARGV[5] then return {0} end
  local before = g and running_before()
  redis.call('ZREM', KF, id)
  redis.call('HDEL', KL, id)
  if g then
    local woke = fair_release(g) + slot_wakes(before)
    if woke > 0 then wake(woke) end
  end
  local m = meta_of(id)
  local attempts = tonumber(redis.call('HGET', KN, id)) or 0
  if attempts >= m.max then
    bury(id)
    if ARGV[8] ~= '' then redis.call('HSET', KE, id, ARGV[8]) end
    emit('dead', id, 'a', attempts, 'e', string.sub(ARGV[8], 1, EVENT_ERROR_BYTES))
    flush_turn()
    return {2}
  end
  local delay = tonumber(ARGV[6])
  if delay < 0 then
    if m.kind == 'e' then
      delay = math.min(m.cap, m.base * 2 ^ (attempts - 1))
      delay = math.floor(delay * (0.5 + 0.5 * tonumber(ARGV[7])))
    else
      delay = m.base
    end
  end
  count('retried')
  local run_at = now + math.max(delay, 0)
  line_up(id, m, run_at)
  emit('nacked', id, 'a', attempts, 'r', run_at, 'e', string.sub(ARGV[8], 1, EVENT_ERROR_BYTES))
  flush_turn()
  return {1, run_at}
end

if op == 'extend' then
  -- ARGV: 4 id, 5 fence, 6 lease ms. Reply: {1, deadline} or {0}.
  local id = ARGV[4]
  if not holds(id, ARGV[5]) then return {0} end
  local deadline = now + tonumber(ARGV[6])
  redis.call('ZADD', KF, 'XX', deadline, id)
  return {1, deadline}
end

if op == 'cancel' then
  -- ARGV: 4 id. Reply: {1} cancelled, {2} running (not cancelled),
  -- {3} dead (purged), {0} unknown.
  local id = ARGV[4]
  if ready_rem(id) or redis.call('ZREM', KW, id) > 0 then
    forget(id)
    emit('cancelled', id)
    settle()
    return {1}
  end
  if redis.call('ZSCORE', KF, id) then return {2} end
  if redis.call('ZREM', KX, id) + redis.call('ZREM', KC, id) > 0 then
    forget(id)
    emit('cancelled', id)
    settle()
    return {3}
  end
  return {0}
end

if op == 'reschedule' then
  -- ARGV: 4 id, 5 delay ms (-1: use 6), 6 run-at ms. Reply: {1, run_at},
  -- {2} running, {0} unknown or dead.
  local id = ARGV[4]
  local delay, at = tonumber(ARGV[5]), tonumber(ARGV[6])
  local run_at = at
  if delay >= 0 then run_at = now + delay end
  if not ready_rem(id) and redis.call('ZREM', KW, id) == 0 then
    if redis.call('ZSCORE', KF, id) then return {2} end
    return {0}
  end
  line_up(id, meta_of(id), run_at)
  emit('rescheduled', id, 'r', run_at)
  flush_turn()
  return {1, run_at}
end

-- A listing's rows ({id, score, ...} from a sorted set) as
-- {id, score, [attempts, error,] payload, ...}, stopping before the first
-- row whose bytes (id, error, payload) before it reach max_bytes (the
-- first row always comes: memory.rs's within_listing_bytes).
local function listed(rows, with_attempts, max_bytes)
  local out, bytes = {}, 0
  for i = 1, #rows, 2 do
    if bytes >= max_bytes then break end
    local m = meta_of(rows[i])
    out[#out + 1] = rows[i]
    out[#out + 1] = rows[i + 1]
    bytes = bytes + #rows[i]
    if with_attempts then
      local err = redis.call('HGET', KE, rows[i]) or ''
      out[#out + 1] = tonumber(redis.call('HGET', KN, rows[i])) or 0
      out[#out + 1] = err
      bytes = bytes + #err
    end
    local payload = m and m.payload or ''
    bytes = bytes + #payload
    out[#out + 1] = payload
  end
  return out
end

if op == 'dead' then
  -- ARGV: 4 limit, 5 payload bytes at most (see listed). Reply: {id,
  -- died ms, attempts, error ('' none), payload, ...}
  return listed(redis.call('ZRANGE', KX, 0, tonumber(ARGV[4]) - 1, 'WITHSCORES'), true, tonumber(ARGV[5]))
end

if op == 'done' then
  -- ARGV: 4 limit, 5 payload bytes at most (see listed). Reply: {id,
  -- acked ms, payload, ...}, most recent first.
  return listed(redis.call('ZREVRANGE', KC, 0, tonumber(ARGV[4]) - 1, 'WITHSCORES'), false, tonumber(ARGV[5]))
end

-- Lookups (`get`, `list`; memory.rs: `Queue::info`, `Queue::list`). Read
-- only: a record still in the pre-bucket KD is read there, not moved, and
-- nothing is promoted, so a delayed job past its due time, or a running
-- one past its lease, reads so until the next claim or stats moves it.
-- States: 1 ready (r), 2 delayed (w), 3 running (f), 4 dead (x),
-- 5 completed (c). A cancelled job is gone: unknown.
local LOOKUP_SETS, PREVIEW = {KR, KW, KF, KX, KC}, 256

-- Job `id`'s row, in `state` at `score`: {id, state, score (whole), prio,
-- max attempts, attempts, fence ('' unless running), last error ('' none),
-- payload bytes, the payload's first PREVIEW bytes (all of it if `whole`),
-- group ('' the default)}; nil without a record.
local function looked_up(id, state, score, whole)
  local v = redis.call('HGET', bucket(id), id) or redis.call('HGET', KD, id)
  if not v then return nil end
  local nl = string.find(v, '\n', 1, true)
  local seq, prio, max = string.match(string.sub(v, 1, nl - 1), '^(%d+),(%d+),(%d+),')
  if not seq then prio, max = 0, 5 end
  local fence = ''
  if state == 3 then fence = held_value(redis.call('HGET', KL, id) or '') end
  return {id, state, string.format('%d', tonumber(score)), tonumber(prio), tonumber(max),
          tonumber(redis.call('HGET', KN, id)) or 0, fence,
          redis.call('HGET', KE, id) or '', #v - nl, whole and string.sub(v, nl + 1) or string.sub(v, nl + 1, nl + PREVIEW),
          group_in(v)}
end

if op == 'get' then
  -- ARGV: 4 id, 5 '1' for the whole payload (else its preview). Reply:
  -- the job's row, or {} if unknown.
  local id = ARGV[4]
  for state, key in ipairs(LOOKUP_SETS) do
    local score = redis.call('ZSCORE', key, id)
    if score then return looked_up(id, state, score, ARGV[5] == '1') or {} end
  end
  return {}
end

if op == 'list' then
  -- ARGV: 4 state (1..5), 5 limit, 6 cursor score ('' from the start), 7
  -- cursor id. Resumes right after the cursor's job if it is still there
  -- at that score, else at the first job scored that or more (so a job
  -- that stays is never skipped; ties are in id order, as in memory).
  -- Reply: rows (see looked_up) in the set's order, at most limit.
  local state = tonumber(ARGV[4])
  local key, limit, start = LOOKUP_SETS[state], tonumber(ARGV[5]), 0
  if ARGV[6] ~= '' then
    local at = redis.call('ZSCORE', key, ARGV[7])
    if at and tonumber(at) == tonumber(ARGV[6]) then
      start = redis.call('ZRANK', key, ARGV[7]) + 1
    else
      start = redis.call('ZCOUNT', key, '-inf', '(' .. ARGV[6])
    end
  end
  local out = {}
  local rows = redis.call('ZRANGE', key, start, start + limit - 1, 'WITHSCORES')
  for i = 1, #rows, 2 do
    for _, x in ipairs(looked_up(rows[i], state, rows[i + 1], false) or {}) do out[#out + 1] = x end
  end
  return out
end

-- The dead jobs a replay or purge names: ARGV[4], or every one if ''.
local function dead_named()
  if ARGV[4] == '' then return redis.call('ZRANGE', KX, 0, -1) end
  return {ARGV[4]}
end

if op == 'replay' then
  -- ARGV: 4 id ('' for every dead job). Reply: {replayed}
  local n = 0
  for _, id in ipairs(dead_named()) do
    if redis.call('ZREM', KX, id) == 1 then
      local m = meta_of(id)
      if m then
        redis.call('HDEL', KN, id)
        redis.call('HDEL', KE, id)
        ready_add(id, m)
        emit('replayed', id)
        n = n + 1
      end
    end
  end
  if n > 0 then wake() end
  flush_turn()
  return {n}
end

if op == 'purge' then
  -- ARGV: 4 id ('' for every dead job). Reply: {purged}
  local n = 0
  for _, id in ipairs(dead_named()) do
    if redis.call('ZREM', KX, id) == 1 then
      forget(id)
      emit('purged', id)
      n = n + 1
    end
  end
  if n > 0 then settle() end
  return {n}
end

-- What the queue holds: ready, delayed, in flight, dead.
local function counts()
  return redis.call('ZCARD', KR), redis.call('ZCARD', KW), redis.call('ZCARD', KF), redis.call('ZCARD', KX)
end

if op == 'layout' then
  -- The partition count in force for the sharded queue based on this one:
  -- the stored one; else 1 if this queue holds jobs; else none.
  -- ARGV: 4 the count asked for; 5 the count in force that lets it be
  -- stored ('' for none); 6 '1' to store it (else only report).
  -- Stored also when none is in force, or when the jobs here imply it.
  -- Reply: {count in force afterwards (the one asked for if none),
  --         1 if that count is stored}
  local stored = redis.call('HGET', KM, 'partitions') or ''
  local current = stored
  local ready, delayed, running, dead = counts()
  if current == '' and ready + delayed + running + dead > 0 then
    current = '1'
  end
  if ARGV[6] == '1' and (current == ARGV[5] or current == '' or (stored == '' and current == ARGV[4])) then
    redis.call('HSET', KM, 'partitions', ARGV[4])
    revive()
    -- Partitioned, this queue itself takes no jobs (a plain producer's
    -- push would be stranded); with one partition it is the queue.
    if ARGV[4] == '1' then
      redis.call('HDEL', KM, 'retired')
    else
      redis.call('HSET', KM, 'retired', '1')
    end
    return {tonumber(ARGV[4]), 1}
  end
  if current == '' then return {tonumber(ARGV[4]), 0} end
  return {tonumber(current), stored ~= '' and 1 or 0}
end

if op == 'retire' then
  -- Closes the queue to pushes (a partition of a layout being replaced),
  -- only while it holds nothing; or opens it again.
  -- ARGV: 4 '1' to close, '0' to open. Reply: {1 if done, ready, delayed,
  -- in flight, dead}
  local ready, delayed, running, dead = counts()
  if ARGV[4] == '0' then
    redis.call('HDEL', KM, 'retired')
    settle()
  elseif ready + delayed + running + dead > 0 then
    return {0, ready, delayed, running, dead}
  else
    redis.call('HSET', KM, 'retired', '1')
    revive()
  end
  return {1, ready, delayed, running, dead}
end

if op == 'exists' then
  -- Whether anything was ever written to the queue: every push counts in
  -- KM, and nothing deletes it (memory.rs: `job_exists`, `is_blank`).
  -- Reply: 1 or 0.
  -- A watcher's field v alone is not a write to the queue (nor is the
  -- expiry G a watch of a queue without state gives it).
  local marks = redis.call('HEXISTS', KM, 'v') + redis.call('HEXISTS', KM, 'G')
  if redis.call('HLEN', KM) - marks > 0 then return 1 end
  return 0
end

if op == 'pause' then
  -- Pauses the queue (pushes are taken, claims get nothing) or resumes it;
  -- a resume wakes one sleeping consumer per ready job (at least one).
  -- ARGV: 4 '1' to pause, '0' to resume. Reply: 1 if that changed it, else 0.
  local paused = redis.call('HEXISTS', KM, 'paused') == 1
  if ARGV[4] == '1' then
    if paused then return 0 end
    redis.call('HSET', KM, 'paused', '1')
    revive()
    emit('paused', '')
    return 1
  end
  if not paused then return 0 end
  redis.call('HDEL', KM, 'paused')
  settle()
  emit('resumed', '')
  wake(math.max(redis.call('ZCARD', KR), 1))
  return 1
end

if op == 'stats' then
  -- Reply: {ready, delayed, in flight, dead, pushed, claimed, acked,
  --         retried, dead total, redelivered, completed kept, paused (1
  --         or 0), groups, groups held, limited claims, lateness sum ms,
  --         one count per lateness bucket, lateness samples...}
  promote()
  flush_turn()
  local c = redis.call('HMGET', KM, 's', 'replaced', 'f', 'b', 'acked', 'retried', 'dead', 'redelivered')
  local v = {}
  for i = 1, 8 do v[i] = tonumber(c[i]) or 0 end
  local out = {redis.call('ZCARD', KR), redis.call('ZCARD', KW), redis.call('ZCARD', KF), redis.call('ZCARD', KX),
               v[1] - v[2], v[3] - v[4], v[5], v[6], v[7], v[8], redis.call('ZCARD', KC)}
  out[#out + 1] = redis.call('HEXISTS', KM, 'paused')
  out[#out + 1] = redis.call('ZCARD', KB)
  out[#out + 1] = redis.call('ZCARD', KH)
  out[#out + 1] = tonumber(redis.call('HGET', KM, 'lc')) or 0
  local fields = {'hs'}
  for b = 1, #LATENESS_BOUNDS + 1 do fields[#fields + 1] = 'h' .. b end
  for _, v in ipairs(redis.call('HMGET', KM, unpack(fields))) do out[#out + 1] = tonumber(v) or 0 end
  for _, v in ipairs(redis.call('LRANGE', KT, 0, -1)) do out[#out + 1] = tonumber(v) end
  return out
end

if op == 'events' then
  -- A watcher's read of the event stream (docs/JOBS.md, "Events").
  -- ARGV: 4 watch ms (0: leave the watch as it is; else events are
  --       written until now + that; a lapsed mark drops the stream),
  --       5 after: a stream id ('' for none: reply only the last id),
  --       6 count.
  -- Reply: {last id ('0-0' if none) or '', first id held ('' if none),
  --         entries after `after` as XRANGE gives them, at most count}
  local ms = tonumber(ARGV[4])
  if ms > 0 then
    -- A mark that ran out left steps unrecorded: the stream starts anew,
    -- so a resume from before the lapse finds its id gone (a gap) rather
    -- than the older events with nothing after them.
    local mark = redis.call('HMGET', KM, 'v', 'G')
    if (tonumber(mark[1]) or 0) < now then redis.call('DEL', KV) end
    -- A watch is no write to the queue: on a queue without state (m
    -- holding no more than a mark) or one set to expire, m lives only
    -- as long as the watch needs it, so watching leaves no key behind.
    local bare = redis.call('HLEN', KM) == (mark[1] and 1 or 0)
    redis.call('HSET', KM, 'v', now + ms)
    redis.call('PEXPIRE', KV, ms + 60000)
    local ends = now + ms + 60000
    if (bare or mark[2]) and (tonumber(mark[2]) or 0) < ends then
      redis.call('HSET', KM, 'G', ends)
      redis.call('PEXPIREAT', KM, ends)
    end
  end
  local first = redis.call('XRANGE', KV, '-', '+', 'COUNT', 1)
  local first_id = first[1] and first[1][1] or ''
  if ARGV[5] == '' then
    local last = redis.call('XREVRANGE', KV, '+', '-', 'COUNT', 1)
    return {last[1] and last[1][1] or '0-0', first_id, {}}
  end
  return {'', first_id, redis.call('XRANGE', KV, '(' .. ARGV[5], '+', 'COUNT', tonumber(ARGV[6]))}
end

-- A rate as three ARGV ('' for none): count, period ms.
local function rate_args(i)
  if ARGV[i] == '' then return nil end
  return ARGV[i], ARGV[i + 1]
end

if op == 'limits' then
  -- Sets the queue's limits (turning it fair): ARGV 4 concurrency, 5 and
  -- 6 rate count and period ms, 7 group concurrency, 8 and 9 group rate
  -- ('' none). Held groups are placed again under them. Reply: 1.
  turn_fair()
  local fields = {'cc', 'rn', 'rp', 'gc', 'gn', 'gp'}
  for i, f in ipairs(fields) do
    if ARGV[3 + i] == '' then
      redis.call('HDEL', KM, f)
    else
      redis.call('HSET', KM, f, ARGV[3 + i])
    end
  end
  revive()
  limits = nil
  local n = replace_held()
  if n > 0 then wake(n) end
  flush_turn()
  settle()
  return 1
end

if op == 'group_limits' then
  -- Sets group ARGV[4]'s own limits (ARGV 5 concurrency, 6 and 7 rate
  -- count and period ms, '' for the queue's), or drops them when all
  -- three are ''. Reply: 1, or {0, the most kept} when the queue keeps
  -- its most already.
  turn_fair()
  local g = ARGV[4]
  if ARGV[5] == '' and ARGV[6] == '' then
    redis.call('HDEL', KP, g)
  else
    if redis.call('HEXISTS', KP, g) == 0 and redis.call('HLEN', KP) >= tonumber(ARGV[8]) then
      flush_turn()
      return {0, tonumber(ARGV[8])}
    end
    redis.call('HSET', KP, g, ARGV[5] .. ',' .. ARGV[6] .. ',' .. ARGV[7])
  end
  local o = redis.call('HLEN', KP)
  if o > 0 then redis.call('HSET', KM, 'O', o) else redis.call('HDEL', KM, 'O') end
  revive()
  limits, own_limits = nil, {}
  local n = replace_held(g)
  if n > 0 then wake(n) end
  flush_turn()
  settle()
  return {1}
end

if op == 'limits_get' then
  -- ARGV: 4 a group ('' none). Reply: {concurrency, rate count, rate
  -- period, group concurrency, group rate count, period, then the group's
  -- own: concurrency, rate count, period} ('' for none).
  local v = redis.call('HMGET', KM, 'cc', 'rn', 'rp', 'gc', 'gn', 'gp')
  local out = {}
  for i = 1, 6 do out[i] = v[i] or '' end
  local own = ARGV[4] ~= '' and redis.call('HGET', KP, ARGV[4])
  local oc, on, op_ = '', '', ''
  if own then oc, on, op_ = string.match(own, '^(%d*),(%d*),(%d*)$') end
  out[7], out[8], out[9] = oc, on, op_
  return out
end

if op == 'groups' then
  -- A page of the queue's groups, most ready jobs first (ties: name
  -- descending), strictly after the cursor (count, group) in that order,
  -- whether this queue holds that group or not (each partition of a
  -- queue answers from the same cursor; fair.rs: `list`).
  -- ARGV: 4 limit, 5 cursor count ('' from the start), 6 cursor group.
  -- Reply: per group {group, ready, running, held until ('' none),
  -- concurrency, rate count, rate period ('' none)}.
  local limit = tonumber(ARGV[4])
  local start = 0
  if ARGV[5] ~= '' then
    -- In ascending order, the rank of the first entry at or above
    -- (count, group): those below it come after the cursor. Entries of
    -- one count are in name order: a binary search among them.
    local lo = redis.call('ZCOUNT', KB, '-inf', '(' .. ARGV[5])
    local hi = lo + redis.call('ZCOUNT', KB, ARGV[5], ARGV[5])
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if bytes_lt(redis.call('ZRANGE', KB, mid, mid)[1], ARGV[6]) then lo = mid + 1 else hi = mid end
    end
    start = redis.call('ZCARD', KB) - lo
  end
  local rows = redis.call('ZREVRANGE', KB, start, start + limit - 1, 'WITHSCORES')
  local out = {}
  for i = 1, #rows, 2 do
    local g = rows[i]
    local c, n, p = limits_of(g)
    for _, x in ipairs({g, tonumber(rows[i + 1]), tonumber(redis.call('HGET', KU, g)) or 0,
                        redis.call('ZSCORE', KH, g) or '', c or '', n or '', p or ''}) do
      out[#out + 1] = x
    end
  end
  return out
end

return redis.error_reply('unknown job operation ' .. op)
