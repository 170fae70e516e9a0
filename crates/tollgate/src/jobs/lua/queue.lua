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
--                    from 1 s to 5 min) and group, else "<seq>,<prio>,<max attempts>,
--                    <backoff kind>,<backoff base ms>,<backoff max ms>[,<group>]\n<payload>"
--                    (no group: the default group)
--   KEYS[3] r  ZSET  ready: id -> (255 - prio) * 2^44 + seq (every ready
--                    job, of every group)
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
-- Groups and limits (a fair queue: m's field F; see "Fair queues" below):
--   r:<group> ZSET  a group's ready jobs, scored as in r ("r:" is the
--              default group's), unless it has one alone in a
--   a  HASH  group -> "<score> <id>": the one ready job of a group that
--            had none when it came (most groups of a queue with many
--            have one or none: no set of their own to make and drop)
--   g  ZSET  groups that may run: group -> turn (m's field T: the last
--            turn given)
--   h  ZSET  groups a limit holds back: group -> until when (ms), or
--            HELD_FOR_SLOT (until one of its jobs ends)
--   b  ZSET  groups with ready or running jobs: group -> ready count
--   u  HASH  group -> running count (absent: 0)
--   y:<group> ZSET  a group's rate log: the jobs its rate let go within
--            its period (member: the delivery's fence, score: ms); q the
--            queue rate's; each expires a period after its last job
--   p  HASH  group -> its own limits "<concurrency>,<count>,<period ms>"
--            ('' parts: the queue's); m's field O counts them
--   in m: cc concurrency, rn/rp rate count and period ms, gc group
--   concurrency, gn/gp group rate, lc claims that got fewer jobs than
--   asked while jobs were ready
--   l's value is "<fence>:<group>" on a fair queue (the group an ack
--   frees a slot of, without reading the record)
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
local KG, KH, KB = string.sub(KM, 1, -2) .. 'g', string.sub(KM, 1, -2) .. 'h', string.sub(KM, 1, -2) .. 'b'
local KU, KY, KP = string.sub(KM, 1, -2) .. 'u', string.sub(KM, 1, -2) .. 'y', string.sub(KM, 1, -2) .. 'p'
local KA, KQ = string.sub(KM, 1, -2) .. 'a', string.sub(KM, 1, -2) .. 'q'
local op, channel = ARGV[1], ARGV[2]
-- A field no job id or group key can be (neither has whitespace), with a
-- value longer than Redis's hash-max-listpack-value (64 by default): a
-- hash holding it is a hash table, never a listpack. The hashes that
-- claims and acks read and write many fields of at once (l, n, u, a)
-- hold it while they hold anything: a listpack of a few hundred fields is
-- searched field by field, which halved a queue's throughput at 500 jobs
-- running (docs/BENCHMARKS.md, "Job queues"). settle() drops them with
-- the queue's last job.
local PAD_FIELD, PAD = ' ', string.rep('-', 100)
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
local function clock()
  if now == 0 then now = time_ms() end
  return now
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
  -- No job left: the padded hashes hold their pad alone.
  redis.call('DEL', KL, KN, KU, KA)
  local f = redis.call('HMGET', KM, 'paused', 'retired', 'partitions', 'G', 'v', 'cc', 'rn', 'gc', 'gn', 'O')
  -- (A layout of one partition is the plain queue's: forgotten, the next
  -- handle stores it again, and one naming more is refused or retires
  -- this queue, loudly either way.)
  if f[1] or f[2] or (f[3] and f[3] ~= '1') then return end
  -- Limits are kept (so is a rate's last arrival time, in y).
  if f[6] or f[7] or f[8] or f[9] or (tonumber(f[10]) or 0) > 0 then return end
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
  local seq, prio, max, kind, base, cap, group = string.match(head, '^(%d+),(%d+),(%d+),(%a),(%d+),(%d+),?(.*)$')
  if not seq then
    seq, prio, max, kind, base, cap, group = head, 0, 5, 'e', 1000, 300000, ''
  end
  return {prio = tonumber(prio), seq = tonumber(seq), max = tonumber(max), kind = kind,
          base = tonumber(base), cap = tonumber(cap), group = group, payload = string.sub(v, nl + 1)}
end

-- The group of record `v` ('' the default).
local function group_in(v)
  local head = string.sub(v, 1, string.find(v, '\n', 1, true) - 1)
  return string.match(head, '^%d+,%d+,%d+,%a,%d+,%d+,(.*)$') or ''
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

-- Fair queues (memory: jobs/fair.rs, the reference; its doc says the
-- rules). Plain queues never reach these steps: each starts from
-- is_fair(), or from l's value or a record naming a group.
local HELD_FOR_SLOT = 4503599627370496
local fair_on, limits, own_limits, turn, turn_read, turn_dirty = nil, nil, {}, 0, false, false

local function is_fair()
  if fair_on == nil then fair_on = redis.call('HEXISTS', KM, 'F') == 1 end
  return fair_on
end

-- m's fields of a fair queue: the hot paths read them with the read of m
-- they make anyway (fair_fields_at), the others when first needed.
local FAIR_FIELDS = {'F', 'cc', 'rn', 'rp', 'gc', 'gn', 'gp', 'O', 'T'}

-- Takes the FAIR_FIELDS read from m, `v[i]` on.
local function fair_fields_at(v, i)
  fair_on = v[i] ~= false
  limits = {cc = tonumber(v[i + 1]), rn = tonumber(v[i + 2]), rp = tonumber(v[i + 3]),
            gc = tonumber(v[i + 4]), gn = tonumber(v[i + 5]), gp = tonumber(v[i + 6]),
            o = tonumber(v[i + 7]) or 0}
  turn, turn_read = tonumber(v[i + 8]) or 0, true
end

-- The queue's limits (m's fields), read once per call.
local function queue_limits()
  if not limits then
    local v = redis.call('HMGET', KM, unpack(FAIR_FIELDS))
    -- What this call already knows stays: the flag, a turn in use.
    local on, t, t_read = fair_on, turn, turn_read
    fair_fields_at(v, 1)
    if on ~= nil then fair_on = on end
    if t_read then turn = t end
  end
  return limits
end

-- Whether any group has a limit (the queue's group limits, or one of its
-- own): else nothing is ever held back per group (h stays empty).
local function group_limited()
  local L = queue_limits()
  return L.gc or L.gn or L.o > 0
end

-- Whether the queue has any limit at all.
local function limited()
  local L = queue_limits()
  return L.cc or L.rn or group_limited()
end

-- The limits in force for group `g`: concurrency, rate count, rate period.
local function limits_of(g)
  local L = queue_limits()
  local c, n, p = L.gc, L.gn, L.gp
  if L.o > 0 then
    local own = own_limits[g]
    if own == nil then
      own = redis.call('HGET', KP, g) or false
      own_limits[g] = own
    end
    if own then
      local oc, on, op = string.match(own, '^(%d*),(%d*),(%d*)$')
      if oc ~= '' then c = tonumber(oc) end
      if on ~= '' then n, p = tonumber(on), tonumber(op) end
    end
  end
  return c, n, p
end

-- Rate logs (fair.rs: `rate_holds`): jobs this call let go and has not
-- written yet (their fences come later), per log key.
local pending_rate = {}

-- Whether the rate of n per p ms whose log is `key` holds a job back now:
-- then from when (ms) it lets the next go (the n-th newest job leaves the
-- window (now - p, now] at its time + p). Reads only: a log is trimmed
-- when written (log_rates) and, the queue's, by promote, as fair.rs
-- trims its logs. The jobs this call let go count at now, after the
-- logged ones up to now (a clock set back leaves some later).
local function log_holds(key, n, p)
  local t = clock()
  local dead = redis.call('ZCOUNT', key, '-inf', t - p)
  local upto = redis.call('ZCOUNT', key, '(' .. (t - p), t)
  local live = redis.call('ZCARD', key) - dead
  local pend = pending_rate[key] or 0
  local all = live + pend
  if all < n then return nil end
  local i = all - n
  if i >= upto and i < upto + pend then return t + p end
  if i >= upto then i = i - pend end
  return tonumber(redis.call('ZRANGE', key, dead + i, dead + i, 'WITHSCORES')[2]) + p
end

-- HSETs (or ZADDs) `items` to `key` in chunks (unpack's limit).
local function chunked(cmd, key, items)
  for i = 1, #items, 1000 do
    redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
  end
end

-- Whether `a` sorts before `b` byte by byte, as sorted-set members and
-- Rust strings do (Lua's own `<` follows the server's locale).
local function bytes_lt(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- The next turn (m's T, written back by flush_turn).
local function next_turn()
  if not turn_read then
    turn, turn_read = tonumber(redis.call('HGET', KM, 'T')) or 0, true
  end
  turn = turn + 1
  turn_dirty = true
  return turn
end

local function flush_turn()
  if turn_dirty then redis.call('HSET', KM, 'T', string.format('%d', turn)) end
  turn_dirty = false
end

-- Whether a limit holds group `g` back (its running count `running`, if
-- known): its time in h, else nil; and its rate's arrival time.
local function held_until(g, running)
  local c, n, p = limits_of(g)
  if c then
    running = running or tonumber(redis.call('HGET', KU, g)) or 0
    if running >= c then return HELD_FOR_SLOT end
  end
  if n then return log_holds(KY .. ':' .. g, n, p) end
  return nil
end

-- Puts groups `gs` (each with ready jobs, in neither g nor h), in order,
-- at the back of the line, or in h where a limit holds one; `running`:
-- their running counts where known (by index). How many may run.
local function place_many(gs, running)
  local line, held = {}, {}
  for i, g in ipairs(gs) do
    local until_ = held_until(g, running and running[i])
    if until_ then
      held[#held + 1] = until_
      held[#held + 1] = g
    else
      line[#line + 1] = next_turn()
      line[#line + 1] = g
    end
  end
  if #line > 0 then chunked('ZADD', KG, line) end
  if #held > 0 then chunked('ZADD', KH, held) end
  return #line / 2
end

-- Puts group `g` in line (see place_many). Whether it may run.
local function place(g, running)
  return place_many({g}, {running}) == 1
end

-- Ready jobs (r has them already): `jobs` is {group, score, id} each, in
-- push order. Each group's set takes its own in one call; a group that
-- had none ready gets in line, in the order of its first job here.
local function fair_ready_many(jobs)
  local per, order = {}, {}
  for _, j in ipairs(jobs) do
    local g = j[1]
    if not per[g] then
      per[g] = {}
      order[#order + 1] = g
    end
    local items = per[g]
    items[#items + 1] = j[2]
    items[#items + 1] = j[3]
  end
  local had = redis.call('ZMSCORE', KB, unpack(order))
  local added = {}
  for _, g in ipairs(order) do added[g] = #per[g] / 2 end
  -- A group's one job alone in a joins its set when more come.
  local ones = {}
  for i, g in ipairs(order) do
    if tonumber(had[i]) == 1 then ones[#ones + 1] = g end
  end
  if #ones > 0 then
    local alone, moved = redis.call('HMGET', KA, unpack(ones)), {}
    for i, g in ipairs(ones) do
      if alone[i] then
        local score, id = string.match(alone[i], '^(%d+) (.*)$')
        per[g][#per[g] + 1] = score
        per[g][#per[g] + 1] = id
        moved[#moved + 1] = g
      end
    end
    if #moved > 0 then redis.call('HDEL', KA, unpack(moved)) end
  end
  local counts, new, solo = {}, {}, {}
  for i, g in ipairs(order) do
    local before = tonumber(had[i]) or 0
    if before == 0 and added[g] == 1 then
      solo[#solo + 1] = g
      solo[#solo + 1] = string.format('%d ', per[g][1]) .. per[g][2]
    else
      chunked('ZADD', KR .. ':' .. g, per[g])
    end
    counts[#counts + 1] = before + added[g]
    counts[#counts + 1] = g
    if before == 0 then new[#new + 1] = g end
  end
  if #solo > 0 then
    solo[#solo + 1] = PAD_FIELD
    solo[#solo + 1] = PAD
    chunked('HSET', KA, solo)
  end
  chunked('ZADD', KB, counts)
  if #new > 0 then place_many(new) end
end

-- Takes the best ready job of each group `gs[i]` (`ready[i]` ready,
-- `takes[i]` to take): a group's one job from a, else from its set.
-- Returns the ids per group (a list each).
local function take_ready(gs, ready, takes)
  local ones, at = {}, {}
  for i, g in ipairs(gs) do
    if tonumber(ready[i]) == 1 and takes[i] > 0 then
      ones[#ones + 1] = g
      at[g] = #ones
    end
  end
  local alone = #ones > 0 and redis.call('HMGET', KA, unpack(ones)) or {}
  local out, gone = {}, {}
  for i, g in ipairs(gs) do
    local mine = {}
    local v = at[g] and alone[at[g]]
    if v then
      mine[1] = string.match(v, '^%d+ (.*)$')
      gone[#gone + 1] = g
    elseif takes[i] > 0 then
      local got = redis.call('ZPOPMIN', KR .. ':' .. g, takes[i])
      for j = 1, #got, 2 do mine[#mine + 1] = got[j] end
    end
    out[i] = mine
  end
  if #gone > 0 then redis.call('HDEL', KA, unpack(gone)) end
  return out
end

-- Job `id` (scored `score`) of group `g` is ready (r has it already).
local function fair_ready(g, score, id)
  fair_ready_many({{g, score, id}})
end

-- Ready job `id` of group `g` leaves (r no longer has it).
local function fair_unready(g, id)
  if redis.call('ZREM', KR .. ':' .. g, id) == 0 then
    local v = redis.call('HGET', KA, g)
    if not v or string.match(v, '^%d+ (.*)$') ~= id then return end
    redis.call('HDEL', KA, g)
  end
  if tonumber(redis.call('ZINCRBY', KB, -1, g)) <= 0 then
    redis.call('ZREM', KG, g)
    redis.call('ZREM', KH, g)
    if not redis.call('HGET', KU, g) then redis.call('ZREM', KB, g) end
  end
end

-- Jobs of groups `gs` (one entry per job, a group as often as it has
-- jobs here) stop running (f no longer has them). How many consumers to
-- wake: one per group whose concurrency held a job back that may now go
-- (the queue's own: slot_wakes).
local function fair_release_many(gs)
  clock()
  local per, order = {}, {}
  for _, g in ipairs(gs) do
    if not per[g] then
      per[g] = 0
      order[#order + 1] = g
    end
    per[g] = per[g] + 1
  end
  local was = redis.call('HMGET', KU, unpack(order))
  -- Held for a slot only where a group concurrency can be.
  local held = {}
  local L = queue_limits()
  if L.gc or L.o > 0 then held = redis.call('ZMSCORE', KH, unpack(order)) end
  local left, gone, freed, freed_running = {}, {}, {}, {}
  for i, g in ipairs(order) do
    local running = math.max((tonumber(was[i]) or 0) - per[g], 0)
    if running > 0 then
      left[#left + 1] = g
      left[#left + 1] = running
    else
      gone[#gone + 1] = g
    end
    if tonumber(held[i]) == HELD_FOR_SLOT then
      freed[#freed + 1] = g
      freed_running[#freed_running + 1] = running
    end
  end
  if #left > 0 then redis.call('HSET', KU, unpack(left)) end
  if #gone > 0 then
    redis.call('HDEL', KU, unpack(gone))
    -- A group with no job ready or running leaves the index.
    local ready = redis.call('ZMSCORE', KB, unpack(gone))
    local drop = {}
    for i, g in ipairs(gone) do
      if (tonumber(ready[i]) or 1) <= 0 then drop[#drop + 1] = g end
    end
    if #drop > 0 then redis.call('ZREM', KB, unpack(drop)) end
  end
  if #freed == 0 then return 0 end
  redis.call('ZREM', KH, unpack(freed))
  return place_many(freed, freed_running)
end

local function fair_release(g)
  return fair_release_many({g})
end

-- The running count before jobs stop, when the queue's own concurrency
-- may be full (else nil): read before f changes, for slot_wakes.
local function running_before()
  local cc = queue_limits().cc
  if cc then return redis.call('ZCARD', KF) end
  return nil
end

-- How many consumers to wake for slots of the queue's concurrency freed
-- since `before` ran: while it was full, one per slot freed, at most one
-- per group in line (fair.rs: `slot_wakes`).
local function slot_wakes(before)
  local cc = queue_limits().cc
  if not before or not cc or before < cc then return 0 end
  local freed = before - redis.call('ZCARD', KF)
  if freed <= 0 then return 0 end
  return math.min(freed, redis.call('ZCARD', KG))
end

-- The fence and group in l's value `v` (a plain queue's holds the fence
-- alone).
local function held_value(v)
  local fence, g = string.match(v, '^(%d+):(.*)$')
  if fence then return fence, g end
  return v, nil
end


-- Turns the queue fair: every ready and running job so far is in the
-- default group (jobs/fair.rs: `turn_on`).
local function turn_fair()
  if is_fair() then return end
  fair_on = true
  redis.call('HSET', KM, 'F', '1')
  local ready, running = redis.call('ZCARD', KR), redis.call('ZCARD', KF)
  if ready > 0 then redis.call('ZUNIONSTORE', KR .. ':', 1, KR) end
  if running > 0 then
    redis.call('HSET', KU, '', running, PAD_FIELD, PAD)
    local held = redis.call('HGETALL', KL)
    for i = 2, #held, 2 do
      if held[i - 1] ~= PAD_FIELD then held[i] = held[i] .. ':' end
    end
    chunked('HSET', KL, held)
  end
  if ready > 0 or running > 0 then redis.call('ZADD', KB, ready, '') end
  if ready > 0 then place('') end
end

-- Takes held groups `gs` out of h and places them again, in that order.
-- How many may now run.
local function back_in_line(gs)
  if #gs == 0 then return 0 end
  for i = 1, #gs, 1000 do
    redis.call('ZREM', KH, unpack(gs, i, math.min(i + 999, #gs)))
  end
  return place_many(gs)
end

-- Puts held groups back in line (or in h again) under changed limits:
-- every one (in name order), or `g` alone. How many may now run.
local function replace_held(g)
  local held
  if g then
    held = redis.call('ZSCORE', KH, g) and {g} or {}
  else
    held = redis.call('ZRANGE', KH, 0, -1)
    table.sort(held, bytes_lt)
  end
  return back_in_line(held)
end

-- Moves the groups whose rate lets them go again back in line (a bounded
-- batch). How many may now run.
local function fair_promote(batch)
  return back_in_line(redis.call('ZRANGEBYSCORE', KH, '-inf', now, 'LIMIT', 0, batch))
end

-- Ready job `id` (record `m`): in r, and in its group's set if fair.
local function ready_add(id, m)
  local score = ready_score(m)
  redis.call('ZADD', KR, score, id)
  if is_fair() then fair_ready(m.group, score, id) end
end

-- Takes job `id` out of r (and its group's set): whether it was there.
local function ready_rem(id)
  if redis.call('ZREM', KR, id) == 0 then return false end
  if is_fair() then
    local v = record_of(id)
    if v then fair_unready(group_in(v), id) end
  end
  return true
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
  ready_add(id, m)
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
      ready_add(id, m)
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
  local before = #ended > 0 and is_fair() and running_before()
  for _, id in ipairs(ended) do
    redis.call('ZREM', KF, id)
    if is_fair() then
      local _, g = held_value(redis.call('HGET', KL, id) or '')
      if g then readied = readied + fair_release(g) end
    end
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
  if is_fair() then
    readied = readied + slot_wakes(before)
    if group_limited() then readied = readied + fair_promote(BATCH) end
    -- The queue rate's log, trimmed to its period (fair.rs: `promote`).
    local L = queue_limits()
    if L.rn then redis.call('ZREMRANGEBYSCORE', KQ, '-inf', now - L.rp) end
  end
  return readied
end

-- The soonest time something may become claimable (ms), or -1: a delayed
-- job due, a lease over, a rate letting a job go.
local function next_due()
  local w = redis.call('ZRANGE', KW, 0, 0, 'WITHSCORES')
  local f = redis.call('ZRANGE', KF, 0, 0, 'WITHSCORES')
  local soonest = -1
  local function consider(t)
    if t and (soonest < 0 or t < soonest) then soonest = t end
  end
  consider(tonumber(w[2]))
  consider(tonumber(f[2]))
  if is_fair() then
    local h = tonumber(redis.call('ZRANGE', KH, 0, 0, 'WITHSCORES')[2])
    if h and h < HELD_FOR_SLOT then consider(h) end
    local L = queue_limits()
    if L.rn then consider(log_holds(KQ, L.rn, L.rp)) end
  end
  return soonest
end

-- Checks that `id` is in flight under `fence`.
local function holds(id, fence)
  local v = redis.call('HGET', KL, id)
  return v and held_value(v) == fence
end

-- Puts job `id` in line for `run_at`: ready if due, else delayed. Wakes a
-- sleeping consumer when it is ready, or is now the first delayed job (a
-- consumer may be sleeping until a later due time).
local function line_up(id, m, run_at)
  if run_at <= now then
    ready_add(id, m)
    wake()
  else
    redis.call('ZADD', KW, run_at, id)
    if redis.call('ZRANGE', KW, 0, 0)[1] == id then wake() end
  end
end

-- The record head of a push (prio, max attempts, backoff kind, base ms,
-- max ms, as strings): empty options when they are the defaults.
local function head_of(seq, prio, max, kind, base, cap, group)
  if group and group ~= '' then
    return string.format('%d,%d,%d,%s,%d,%d,', seq, prio, max, kind, base, cap) .. group .. '\n'
  end
  if prio == '0' and max == '5' and kind == 'e' and base == '1000' and cap == '300000' then
    return seq .. '\n'
  end
  return string.format('%d,%d,%d,%s,%d,%d\n', seq, prio, max, kind, base, cap)
end
