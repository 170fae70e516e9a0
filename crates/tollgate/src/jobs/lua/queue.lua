-- queue.lua: the keys of one job queue and the steps its operations share;
-- included first by jobs.lua (the queue operations) and by
-- schedule.lua (the schedules stored with the queue). The same steps as
-- src/jobs/memory.rs (`Queue`, the memory store's reference
-- model); both pass one conformance suite (tests/job_queue.rs, run on
-- memory, Redis, Cluster and Sentinel).
--
-- Keys of one queue, all under one hash tag:
--   KEYS[1] m  HASH  s push sequence (pushes and replacements), f last
--                    fence, b what f has more than its claims (claims =
--                    f - b; see claim in jobs.lua),
--                    counters: replaced (pushes that created no job),
--                    acked, retried, dead, redelivered; paused (1 while
--                    the queue is paused: claims get nothing); G when m
--                    expires (absent: it lives on): set by settle() once
--                    the queue holds nothing, removed by revive()
--   KEYS[2] d  the base name of the record buckets: d:<0..4095>, HASHes
--              (small, so Redis keeps them as compact listpacks), each
--              holding the records of the ids that hash to it:
--                    id -> "<seq>\n<payload>" for a job with the default
--                    options (priority 0, 5 attempts, exponential backoff
--                    from 1 s to 5 min), else "<seq>,<prio>,<max attempts>,
--                    <backoff kind>,<backoff base ms>,<backoff max ms>\n<payload>"
--   KEYS[3] r  ZSET  ready: id -> (255 - prio) * 2^44 + seq
--   KEYS[4] w  ZSET  delayed (and retrying): id -> run-at ms
--   KEYS[5] f  ZSET  in flight: id -> lease deadline ms
--   KEYS[6] l  HASH  in flight: id -> fence of the current delivery
--   KEYS[7] n  HASH  id -> attempts so far (only once claimed)
--   KEYS[8] x  ZSET  dead letters: id -> when it died (ms)
--   KEYS[9] t  LIST  lateness (ms) of the last promoted delayed jobs
--   KEYS[10] c ZSET  completed jobs kept after their ack (only when the
--                    consumer asks to keep some): id -> when acked (ms);
--                    their records stay in d until they leave c
--   e (m's name with e for m, not declared, same hash tag) HASH  dead
--              job id -> the error text of the nack that made it dead
--              (memory.rs: JobData.error)
--   v (m's name with v for m, same hash tag) STREAM  the queue's events
--              (docs/JOBS.md, "Events"), written only while someone
--              watches: m's field v holds the store time (ms) until which
--              a watcher asked for them; each watcher's `events` call
--              moves it on. Capped at about EVENTS_KEPT entries.
-- A job is in exactly one of r, w, f, x, and in d while it exists.
-- An idle queue leaves no key (as the memory store's idle sweep drops
-- it): m and t expire IDLE after the queue was last found holding
-- nothing (no job of any kind, no schedule) while not paused, retired or
-- partitioned; the other keys empty with their last job, v expires with
-- its watch. Whatever puts a job (or a pause, a layout) in the queue
-- makes them live on again.
-- Pushes that make a job ready publish "!<wake key>" on the queue's channel
-- (ARGV[2]) so a sleeping consumer claims it at once.
local KM, KD, KR, KW, KF, KL, KN, KX, KT, KC = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7],
  KEYS[8], KEYS[9], KEYS[10]
local KE = string.sub(KM, 1, -2) .. 'e'
local KV = string.sub(KM, 1, -2) .. 'v'
local op, channel = ARGV[1], ARGV[2]
local function time_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Server time, read only by the operations that need it (acks that claim
-- nothing and keep nothing do not).
local now = 0
if op ~= 'claim' or ARGV[5] ~= '0' or ARGV[6] ~= '0' then
  now = time_ms()
end

-- Events. Unwatched they cost no call on the hot paths: push and claim
-- (with or without acks) read m's field v with the read of m they make
-- anyway (watch_until set from it). Any other operation that has an event
-- to write (an ack without a claim, nack, cancel, reschedule, replay,
-- purge, pause, a stats read that finds a lease ended) reads it once, one
-- HGET, at its first event; one with nothing to write, never. Watched, the first event
-- also sets the stream's expiry (a minute past the watch), so a stream
-- nobody watches any more goes. memory.rs: `Queue::emit`.
local EVENTS_KEPT = 10000
local watch_until, stream_touched = nil, false
local function emit(kind, id, ...)
  if watch_until == nil then watch_until = tonumber(redis.call('HGET', KM, 'v')) or 0 end
  if watch_until == 0 then return end
  if now == 0 then now = time_ms() end
  if watch_until < now then return end
  redis.call('XADD', KV, 'MAXLEN', '~', EVENTS_KEPT, '*', 'k', kind, 'i', id, ...)
  if not stream_touched then
    stream_touched = true
    redis.call('PEXPIRE', KV, watch_until - now + 60000)
  end
end
-- How long m outlives the queue's last job (ms): the store's idle period.
-- The Redis store writes its configured value here (RedisConfig::idle)
-- before loading the scripts.
local IDLE = 600000

-- m and t live on: the queue holds (or is about to hold) something kept.
-- `expiring`: m's field G as already read (nil: read it here).
local function revive(expiring)
  if expiring == nil then expiring = redis.call('HEXISTS', KM, 'G') == 1 end
  if expiring then
    redis.call('HDEL', KM, 'G')
    redis.call('PERSIST', KM)
    redis.call('PERSIST', KT)
  end
end

-- Called where the queue may have come to hold nothing: if it holds no
-- job of any kind and no schedule, and is neither paused, retired nor
-- partitioned (more than one partition), m and t expire IDLE from now (or from the end of a watch),
-- moved on at most once per IDLE / 4 (memory.rs: `busy_until`). A queue
-- without state (no m) gets none.
local function settle()
  for _, k in ipairs({KF, KR, KW, KX, KC}) do
    if redis.call('ZCARD', k) > 0 then return end
  end
  local f = redis.call('HMGET', KM, 'paused', 'retired', 'partitions', 'G', 'v')
  -- (A layout of one partition is the plain queue's: forgotten, the next
  -- handle stores it again, and one naming more is refused or retires
  -- this queue, loudly either way.)
  if f[1] or f[2] or (f[3] and f[3] ~= '1') then return end
  if redis.call('EXISTS', string.sub(KM, 1, -2) .. 'S') == 1 then return end
  if not f[4] and redis.call('EXISTS', KM) == 0 then return end
  if now == 0 then now = time_ms() end
  local ends = math.max(now, tonumber(f[5]) or 0) + IDLE
  if (tonumber(f[4]) or 0) >= ends - IDLE / 4 then return end
  redis.call('HSET', KM, 'G', ends)
  redis.call('PEXPIREAT', KM, ends)
  redis.call('PEXPIREAT', KT, ends)
end

local BATCH, LATENESS_KEPT, DEAD_KEPT, BUCKETS = 100, 200, 10000, 4096
-- Upper bounds (ms) of the lateness histogram's buckets; one more bucket
-- counts what is later than the last. Same as LATENESS_BOUNDS_MS in Rust.
local LATENESS_BOUNDS = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}

-- The record bucket of job `id` (same hash tag as every key of the queue):
-- a polynomial hash of its first 4 and last 8 bytes, cheaper in Lua than
-- redis.sha1hex and as even on random and on sequential ids.
local byte = string.byte
local function bucket(id)
  local a, b, c, d = byte(id, 1, 4)
  local e, f, g, h, i, j, k, l = byte(id, -8, -1)
  local v = (((a or 0) * 31 + (b or 0)) * 31 + (c or 0)) * 31 + (d or 0)
  v = ((((v % 65536) * 31 + (e or 0)) * 31 + (f or 0)) * 31 + (g or 0)) * 31 + (h or 0)
  v = ((((v % 65536) * 31 + (i or 0)) * 31 + (j or 0)) * 31 + (k or 0)) * 31 + (l or 0)
  return KD .. ':' .. v % BUCKETS
end

-- The record of job `id`. Queues written before records were bucketed
-- kept them all in KD; such a record moves to its bucket when first read.
local function record_of(id)
  local b = bucket(id)
  local v = redis.call('HGET', b, id)
  if v then return v end
  v = redis.call('HGET', KD, id)
  if v then
    redis.call('HSET', b, id, v)
    redis.call('HDEL', KD, id)
  end
  return v
end

local function meta_of(id)
  local v = record_of(id)
  if not v then return nil end
  local nl = string.find(v, '\n', 1, true)
  local head = string.sub(v, 1, nl - 1)
  local seq, prio, max, kind, base, cap = string.match(head, '^(%d+),(%d+),(%d+),(%a),(%d+),(%d+)$')
  if not seq then
    seq, prio, max, kind, base, cap = head, 0, 5, 'e', 1000, 300000
  end
  return {prio = tonumber(prio), seq = tonumber(seq), max = tonumber(max), kind = kind,
          base = tonumber(base), cap = tonumber(cap), payload = string.sub(v, nl + 1)}
end

local function ready_score(m)
  return (255 - m.prio) * 17592186044416 + m.seq
end

local function count(field, by)
  redis.call('HINCRBY', KM, field, by or 1)
end

-- Wakes up to `n` sleeping consumers in each listening process.
local function wake(n)
  redis.call('PUBLISH', channel, ARGV[3] .. ' ' .. (n or 1))
end

local function forget(id)
  redis.call('HDEL', bucket(id), id)
  redis.call('HDEL', KD, id)
  redis.call('HDEL', KN, id)
  redis.call('HDEL', KE, id)
end

-- Moves job `id` to the dead letters; the oldest beyond DEAD_KEPT go.
local function bury(id)
  redis.call('ZADD', KX, now, id)
  count('dead')
  if redis.call('ZCARD', KX) > DEAD_KEPT then
    local oldest = redis.call('ZPOPMIN', KX)[1]
    if oldest then forget(oldest) end
  end
end

-- Makes job `id` ready, or dead if it has used all its attempts.
local function requeue_or_bury(id, m)
  local attempts = tonumber(redis.call('HGET', KN, id)) or 0
  if attempts >= m.max then
    bury(id)
    return false, attempts
  end
  redis.call('ZADD', KR, ready_score(m), id)
  return true, attempts
end

-- Moves due delayed jobs to ready, and jobs whose lease ended back to ready
-- (or to the dead letters), in bounded batches. Returns how many became
-- ready.
local function promote()
  local readied = 0
  local due = redis.call('ZRANGEBYSCORE', KW, '-inf', now, 'WITHSCORES', 'LIMIT', 0, BATCH)
  -- Lateness histogram: m holds h<bucket> counts and hs, their sum (ms).
  local hist, late_sum = {}, 0
  for i = 1, #due, 2 do
    local id = due[i]
    redis.call('ZREM', KW, id)
    local m = meta_of(id)
    if m then
      local late = now - tonumber(due[i + 1])
      redis.call('ZADD', KR, ready_score(m), id)
      redis.call('LPUSH', KT, late)
      local b = #LATENESS_BOUNDS + 1
      for j, bound in ipairs(LATENESS_BOUNDS) do
        if late <= bound then
          b = j
          break
        end
      end
      hist[b] = (hist[b] or 0) + 1
      late_sum = late_sum + late
      readied = readied + 1
    end
  end
  if #due > 0 then
    redis.call('LTRIM', KT, 0, LATENESS_KEPT - 1)
    for b, n in pairs(hist) do count('h' .. b, n) end
    count('hs', late_sum)
  end
  local ended = redis.call('ZRANGEBYSCORE', KF, '-inf', now, 'LIMIT', 0, BATCH)
  for _, id in ipairs(ended) do
    redis.call('ZREM', KF, id)
    redis.call('HDEL', KL, id)
    local m = meta_of(id)
    if m then
      count('redelivered')
      local ok, attempts = requeue_or_bury(id, m)
      if ok then
        readied = readied + 1
        emit('expired', id, 'a', attempts)
      else
        emit('expired', id, 'a', attempts)
        emit('dead', id, 'a', attempts)
      end
    end
  end
  return readied
end

-- The soonest time something may become claimable (ms), or -1.
local function next_due()
  local w = redis.call('ZRANGE', KW, 0, 0, 'WITHSCORES')
  local f = redis.call('ZRANGE', KF, 0, 0, 'WITHSCORES')
  local a, b = tonumber(w[2]), tonumber(f[2])
  if a and b then return math.min(a, b) end
  return a or b or -1
end

-- Checks that `id` is in flight under `fence`.
local function holds(id, fence)
  return redis.call('HGET', KL, id) == fence
end

-- Puts job `id` in line for `run_at`: ready if due, else delayed. Wakes a
-- sleeping consumer when it is ready, or is now the first delayed job (a
-- consumer may be sleeping until a later due time).
local function line_up(id, m, run_at)
  if run_at <= now then
    redis.call('ZADD', KR, ready_score(m), id)
    wake()
  else
    redis.call('ZADD', KW, run_at, id)
    if redis.call('ZRANGE', KW, 0, 0)[1] == id then wake() end
  end
end

-- The record head of a push (prio, max attempts, backoff kind, base ms,
-- max ms, as strings): empty options when they are the defaults.
local function head_of(seq, prio, max, kind, base, cap)
  if prio == '0' and max == '5' and kind == 'e' and base == '1000' and cap == '300000' then
    return seq .. '\n'
  end
  return string.format('%d,%d,%d,%s,%d,%d\n', seq, prio, max, kind, base, cap)
end
