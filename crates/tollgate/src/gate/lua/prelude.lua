-- prelude.lua: the general path of every gate script. It expires
-- what ended, hands free permits to the head of the line, and at the end
-- writes back what changed in the meta hash and keeps key TTLs past every
-- deadline in them.
--
-- (Server time and the meta hash were read by head.lua.)
--
-- Keys of one gate, all under one hash tag so the scripts run on Cluster
-- (only m is passed; head.lua derives the others from its name):
--   m  HASH  c capacity, f last fence, b what f has more than its
--                    grants (the first fence minus one, plus every jump
--                    to the clock's floor: grants = f - b), x expiries, s line seq, e extra
--                    permits held (sum of permits-1 over holders), n waiters
--                    asking for more than one permit, o holders that came by
--                    hand-off, H and W upper bounds of the holder and waiter
--                    counts (0: that key is surely empty, so the common path
--                    skips reading it), z no waiter's heartbeat deadline is
--                    earlier than this, T, U and V the TTLs last set on h,
--                    q and p (set a CHUNK beyond what is needed, so most
--                    calls need not extend them), X no lease ends before this
--                    (so until then nothing needs expiring and H is exact
--                    without reading h), r the average gap between
--                    grants from the line (ms, a moving average: the
--                    line's pace) and l when the line last moved (its
--                    last grant, or when it formed): a waiter's estimated
--                    wait is its position times r; P 1 while admissions
--                    are paused, R the least interval between admissions
--                    (ms) and A when the next one may happen (absent: no
--                    admission control); E the epoch of this incarnation of
--                    the gate's state (see new_epoch in head.lua), written
--                    by whichever script first writes m, so a gate whose
--                    state was lost (FLUSHALL, a restart without
--                    persistence, a failover to an empty replica) shows a
--                    new one; K the longest keep (ms) of the revocation
--                    log's live entries; Z the last score handed out in
--                    the log (kept while the log empties, so scores never
--                    go back within an epoch); G the expiry last set on m
--                    (ms); C the last reset of the line (ms, admin.lua);
--                    h the holders, inline, of a gate of capacity up to
--                    INLINE ("<id> <expires> <fence> <permits>" joined by
--                    ',', see head.lua): while H is 0 they are here, and
--                    e, o, X and T are derived from them, not stored;
--                    k 1 while the gate has state only the general path
--                    handles (holders on h, labels, a multi-permit
--                    waiter, admission control, a sweep under way), so
--                    the fast paths need not read those fields; N until
--                    when a barging (non-fair) acquire may be waiting
--                    outside the line: permits freed and left free before
--                    then are announced (wake_barging in head.lua).
--                    m lives IDLE (the store's idle period) past the last
--                    deadline any key holds (the TTLs set on h, q, p and
--                    r, the next admission) and the last write, so an
--                    idle gate leaves no key behind; the cost is one
--                    PEXPIREAT per IDLE / 4 of activity. Its settings
--                    (capacity, pause, admission interval) go with it:
--                    whoever configures a gate watches its epoch and sets
--                    them again. Fences need no key to survive: each is
--                    above server time x 1000 (next_fence) and a gate
--                    cannot grant 1,000 leases a millisecond, so a fence
--                    is above every one handed out before, whatever m
--                    held when it was made.
--   h  ZSET  holders of a gate of capacity above INLINE: lease id -> expiry
--            (ms, server time). A gate picks its layout when it has no
--            holder; a capacity raised past INLINE moves inline holders
--            here, one lowered leaves them here until none is left.
--   p  HASH  d:<id> heartbeat deadline of a waiting ticket (ms);
--            L:<id> label given at entry (counted in m's a);
--            k:<id> permits (only when > 1; of holders on h only);
--            f:<id> fence of a lease on h handed to a waiter, negative
--            until the waiter picks it up
--   q  ZSET  the line: ticket id -> seq (a counter, never time)
--   H  STRING the lone lease of a free gate of capacity 1 (see head.lua):
--            "<id> <gap>", expiring with m, the lease gap ms before; moved
--            into h (read_meta) before any other call reads the holders
--   r  ZSET  the revocation log: token of a holder that ended
--            (leave.lua with a keep) -> now * 1024 at the end, or one more
--            than the last score (Z) if that is more, so scores strictly
--            increase and are a reader's cursor; entries older than K are
--            pruned by later ends and never read (watch.lua); the key
--            lives K past the last end.
--   x  ZSET  tickets an admin took out of the line (admin.lua) -> when (ms),
--            so their waiters' next poll answers that they were removed
--            rather than unknown (poll.lua looks only for a ticket it
--            finds nowhere else); kept REMOVED_KEEP, at most REMOVED_MAX
--            (the latest), the key living REMOVED_KEEP past the last.
-- Deadlines sit in a hash rather than a second sorted set to keep a waiting
-- ticket under 200 bytes; finding stale tickets then takes a scan of p, done
-- only once the earliest possible deadline (z) has passed. A short line is
-- scanned whole at once; a long one in steps of SWEEP_STEP entries, one step
-- per operation, resuming from the cursor Y, with Q the earliest deadline
-- seen (or set) during the pass, which becomes z when the pass ends. So no
-- operation touches more than a bounded slice of a line of any length.
-- Hand-offs are published on the channel named like m with the final "m"
-- replaced by "n"; the message is space-separated "<ticket id>:<fence>".
-- Permits freed for barging waiters: "!<name of m> <free permits>" on the
-- same channel.
--
-- Invariants: permits held (holders + e) never exceed c, except after c was
-- lowered (holders are never evicted); nobody is granted while a ticket ahead
-- of them waits; fences strictly increase per gate; every key but m carries
-- a TTL beyond the last deadline it holds, and m one IDLE beyond theirs
-- (H expires with m: up to the time between the two calls of its SET
-- later, a millisecond as measured, after the lease ended by IDLE; a call
-- in that moment finds the ended lease on fresh state and counts it).
-- head.lua (and possibly a fast path) ran before this: KM, base, MARGIN,
-- SMALL and now are set, and raw (the meta fields) too if a fast path
-- read them.
--
-- The call's state lives in the table S and the helpers in F, so each
-- helper captures two upvalues, not the dozens of locals it uses: Lua
-- builds every closure afresh on each call, and capturing many locals
-- made that set-up the largest part of a general path's cost.
clock()
if not raw then read_meta() end
local KH, KP, KQ, KR = base .. 'h', base .. 'p', base .. 'q', base .. 'r'
-- The meta fields head.lua did not read: 1 x, 2 e, 3 o, 4 T, 5 A, 6 Q, 7 H,
-- 8 n, 9 a, 10 P, 11 R, 12 Y, 13 s, 14 U, 15 V.
local m = redis.call('HMGET', KM, 'x', 'e', 'o', 'T', 'A', 'Q', 'H', 'n', 'a', 'P', 'R', 'Y', 's', 'U', 'V')
local S, F = {
  now = now, KM = KM, KH = KH, KP = KP, KQ = KQ, KR = KR,
  cap = tonumber(raw[1]), f = tonumber(raw[2]) or 0, H = tonumber(m[7]) or 0, W = tonumber(raw[5]) or 0,
  s = tonumber(m[13]) or 0, z = tonumber(raw[6]) or 0, n = tonumber(m[8]) or 0,
  -- a: labels stored in p (holders and waiters); 0 lets removals skip a call.
  a = tonumber(m[9]) or 0,
  -- Admission control (written by set_admission.lua, A also here).
  P = tonumber(m[10]) or 0, R = tonumber(m[11]) or 0, A = tonumber(m[5]) or 0,
  -- r is absent (nil) until the line's first gap was measured.
  r = tonumber(raw[7]), l = tonumber(raw[8]) or 0,
  U = tonumber(m[14]) or 0, V = tonumber(m[15]) or 0, N = tonumber(raw[11]) or 0,
  -- Whether this call freed permits (a holder left, or the capacity or
  -- admission control let more in).
  freed = false,
  -- The stale-ticket sweep of a long line: cursor ('0' or absent: none
  -- under way) and the earliest deadline seen in the pass so far.
  Y = m[12] or '0', Q = tonumber(m[6]) or 0,
  b = tonumber(raw[14]) or 0, x = tonumber(m[1]) or 0, e = tonumber(m[2]) or 0, o = tonumber(m[3]) or 0,
  T = tonumber(m[4]) or 0, X = tonumber(raw[13]) or 0,
  -- Holders inline (m's h) unless the sorted set h holds them (H > 0);
  -- with no holder at all, the next grant picks by capacity (add_holder).
  inline = (tonumber(m[7]) or 0) == 0, held = nil, h_changed = false,
  -- Latest expiry written to h / deadline written to p by this call (0:
  -- none), and whether those keys may lack a TTL (empty before, or
  -- emptied since).
  h_top = 0, w_top = 0, p_touched = false, h_fresh = true, q_fresh = true, p_fresh = true,
  -- The expiry set on r (an end) or x (a removal) by this call, 0: none;
  -- and whether the
  -- body wrote m itself (settings): with any change to m, that makes this
  -- call activity, which keeps m IDLE past now too. Reads are not activity.
  r_top = 0, wrote_meta = false,
  holders = 0, waiting = 0,
  -- Hand-offs made by this call, "<ticket id>:<fence>" (also published).
  handed = {},
}, {}
-- The meta fields as read, to write back only what changed.
local was = {
  f = S.f, b = S.b, x = S.x, s = S.s, e = S.e, n = S.n, o = S.o, H = S.H, W = S.W, z = S.z, T = S.T,
  U = S.U, X = S.X, V = S.V, r = S.r, l = S.l, a = S.a, A = S.A, Y = S.Y, Q = S.Q, N = S.N,
}
local SWEEP_ALL, SWEEP_STEP = 512, 256
-- At most this many ended leases are removed per call, the earliest
-- first: a gate where a huge number ended at once sheds them over several
-- calls, none of which blocks Redis for long. Until then X stays at or
-- before now, so the next call looks again; an ended lease still counts
-- as held (its permits are not granted again), which is safe, and
-- expire_one keeps it from being renewed, released or picked up.
local EXPIRE_STEP = 1000
-- How long, and how many, removed tickets x remembers (as REMOVED_KEEP_MS
-- and REMOVED_MAX in src/gate/types.rs).
local REMOVED_KEEP, REMOVED_MAX = 3600000, 1000

-- The inline holders (see head.lua), parsed, and written back.
function F.inline_holders(h)
  local all = {}
  if h and h ~= '' then
    for id, e, f, k in string.gmatch(h, '(%w+) (%d+) (%-?%d+) (%d+)') do
      all[#all + 1] = {id, tonumber(e), tonumber(f), tonumber(k)}
    end
  end
  return all
end
function F.inline_text(all)
  local parts = {}
  for i, x in ipairs(all) do parts[i] = inline_entry(x[1], x[2], x[3], x[4]) end
  return table.concat(parts, ',')
end

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

-- Records a grant from the line now, for the estimated wait (as
-- GateState::line_moved in src/gate/memory.rs). Departures with
-- nobody in line do not count: an idle gate's gaps say nothing of a
-- line's pace (and so a release on a gate with no line writes nothing
-- for it: see lone_leave.lua).
function F.line_moved()
  if S.l > 0 then
    -- (A clock that went back counts as no gap, as in memory.rs.)
    local gap = math.max(0, S.now - S.l)
    if S.r == nil then S.r = gap else S.r = math.floor(S.r * 0.8 + gap * 0.2 + 0.5) end
  end
  S.l = S.now
end

-- A waiter's estimated wait, -1 until the line's first gap was measured (as
-- GateState::eta in src/gate/memory.rs).
function F.eta(position)
  if S.r == nil then return -1 end
  return position * S.r
end

function F.used()
  return S.holders + S.e
end

function F.permits_of(id, any_multi)
  if not any_multi then return 1 end
  return tonumber(redis.call('HGET', S.KP, 'k:' .. id)) or 1
end

-- Side data of holders in p: extra permits and hand-offs of holders on the
-- sorted set (inline holders keep theirs in h).
function F.holder_side()
  if S.inline then return 0 end
  return S.e + S.o
end

-- p holds side data only while someone waits, holds several permits or
-- holds a hand-off; once none does, Redis has deleted it (and its TTL).
function F.note_side_data()
  if S.waiting == 0 and F.holder_side() == 0 and S.a == 0 then S.p_fresh = true end
end

-- Forgets the label of a departed holder or ticket.
function F.forget_label(id)
  if S.a > 0 and redis.call('HDEL', S.KP, 'L:' .. id) == 1 then S.a = S.a - 1 end
end

-- The inline holder `id`'s place in S.held, or nil.
function F.inline_at(id)
  for i, x in ipairs(S.held) do
    if x[1] == id then return i end
  end
  return nil
end

-- Removes holder `id` and its side data; returns whether it held.
function F.remove_holder(id)
  if S.holders == 0 then return false end
  if S.inline then
    local i = F.inline_at(id)
    if not i then return false end
    local x = table.remove(S.held, i)
    S.h_changed = true
    S.e = S.e - (x[4] - 1)
    if x[3] ~= 0 then S.o = S.o - 1 end
  else
    if redis.call('ZREM', S.KH, id) == 0 then return false end
    if S.e > 0 then
      S.e = S.e - (F.permits_of(id, true) - 1)
      redis.call('HDEL', S.KP, 'k:' .. id)
    end
    if S.o > 0 and redis.call('HDEL', S.KP, 'f:' .. id) == 1 then
      S.o = S.o - 1
    end
  end
  S.holders = S.holders - 1
  S.freed = true
  if S.holders == 0 then S.h_fresh = true end
  F.forget_label(id)
  F.note_side_data()
  return true
end

-- What holder `id` holds: 'held', its lease's end and (with `want_fence`)
-- its fence (0: granted at once; negative: a hand-off not picked up yet);
-- 'ended' if its lease had ended (an expiry not swept yet: see
-- EXPIRE_STEP), which this removes and counts, so such a lease is gone
-- for the operation; or nil if `id` holds nothing.
function F.lookup(id, want_fence)
  if S.holders == 0 then return nil end
  local expires, f
  if S.inline then
    -- (expire() removed every inline lease that ended.)
    local i = F.inline_at(id)
    if not i then return nil end
    return 'held', S.held[i][2], S.held[i][3]
  end
  expires = redis.call('ZSCORE', S.KH, id)
  if not expires then return nil end
  expires = tonumber(expires)
  if expires <= S.now then
    F.remove_holder(id)
    S.x = S.x + 1
    return 'ended'
  end
  f = 0
  if want_fence and S.o > 0 then f = tonumber(redis.call('HGET', S.KP, 'f:' .. id)) or 0 end
  return 'held', expires, f
end

-- Up to `limit` live holders, soonest to end first: {id, expires, fence}.
function F.holder_list(limit)
  local out = {}
  if S.holders == 0 then return out end
  if S.inline then
    for i, x in ipairs(S.held) do out[i] = x end
    table.sort(out, function(u, v) return u[2] < v[2] end)
    while #out > limit do table.remove(out) end
    return out
  end
  -- Leases that ended but are not swept yet (EXPIRE_STEP) are not listed.
  local all = redis.call('ZRANGEBYSCORE', S.KH, '(' .. S.now, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #all, 2 do
    local f = 0
    if S.o > 0 then f = tonumber(redis.call('HGET', S.KP, 'f:' .. all[i])) or 0 end
    out[#out + 1] = {all[i], tonumber(all[i + 1]), f}
  end
  return out
end

-- Records a held lease's fence (a waiter picking up its hand-off).
function F.set_fence(id, f)
  if S.inline then
    S.held[F.inline_at(id)][3] = f
    S.h_changed = true
  else
    redis.call('HSET', S.KP, 'f:' .. id, f)
  end
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

-- Moves a held lease's end (renewal, or a waiter picking up a hand-off,
-- which may shorten it). X must stay a lower bound of every lease's end.
function F.set_expiry(id, expires)
  if S.inline then
    S.held[F.inline_at(id)][2] = expires
    S.h_changed = true
  else
    redis.call('ZADD', S.KH, 'XX', expires, id)
  end
  if expires > S.h_top then S.h_top = expires end
  if S.X == 0 or expires < S.X then S.X = expires end
end

-- Moves the inline holders to the sorted set h (a capacity raised past
-- INLINE): at most INLINE of them.
function F.holders_to_set()
  for _, x in ipairs(S.held) do
    redis.call('ZADD', S.KH, x[2], x[1])
    if x[3] ~= 0 then redis.call('HSET', S.KP, 'f:' .. x[1], x[3]) end
    if x[4] > 1 then redis.call('HSET', S.KP, 'k:' .. x[1], x[4]) end
    if x[2] > S.h_top then S.h_top = x[2] end
    if x[3] ~= 0 or x[4] > 1 then S.p_touched = true end
  end
  S.held, S.h_changed, S.inline, S.h_fresh = {}, true, false, true
end

-- A new holder: `fence` 0 for a grant at once, -f for a hand-off;
-- `permits` > 1 adds to e. A gate with no holder picks their layout here.
function F.add_holder(id, expires, fence, permits)
  if S.holders == 0 then
    S.inline = S.cap <= INLINE
    if S.inline and not S.held then S.held = {} end
  end
  if S.inline then
    S.held[#S.held + 1] = {id, expires, fence, permits}
    S.h_changed = true
  else
    redis.call('ZADD', S.KH, expires, id)
    if fence ~= 0 then redis.call('HSET', S.KP, 'f:' .. id, fence) end
    if permits > 1 then redis.call('HSET', S.KP, 'k:' .. id, permits) end
    if fence ~= 0 or permits > 1 then S.p_touched = true end
  end
  if fence ~= 0 then S.o = S.o + 1 end
  S.e = S.e + permits - 1
  S.holders = S.holders + 1
  if expires > S.h_top then S.h_top = expires end
  if S.X == 0 or expires < S.X then S.X = expires end
end

function F.set_deadline(id, deadline)
  redis.call('HSET', S.KP, 'd:' .. id, deadline)
  if S.z == 0 or deadline < S.z then S.z = deadline end
  -- A pass under way may not reach this field: count it in the pass.
  if S.Y ~= '0' and (S.Q == 0 or deadline < S.Q) then S.Q = deadline end
  if deadline > S.w_top then S.w_top = deadline end
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

-- Grants free permits to the head of the line while the head fits.
-- Whether admission control lets one more in now, and spending it.
function F.may_admit()
  return S.P ~= 1 and (S.R == 0 or S.A <= S.now)
end
function F.admitted()
  if S.R > 0 then S.A = math.max(S.A, S.now) + S.R end
end

function F.promote()
  if S.cap == nil or S.waiting == 0 then return end
  local handed = {}
  while S.waiting > 0 do
    -- With only single-permit tickets in line, a full gate needs no look,
    -- and a gate with room takes the head off the line in one call.
    local head, k, popped
    if S.n == 0 then
      if F.used() >= S.cap or not F.may_admit() then break end
      head, k, popped = redis.call('ZPOPMIN', S.KQ)[1], 1, true
    else
      head = redis.call('ZRANGE', S.KQ, 0, 0)[1]
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

-- A reply of `code` followed by this call's hand-offs, so a waiter in the
-- caller's own process can be woken without waiting for the message.
function F.with_handed(code)
  local reply = {code}
  for i, x in ipairs(S.handed) do reply[i + 1] = x end
  return reply
end

-- Makes a key live past `at` + MARGIN. A key that may lack a TTL gets one
-- outright; otherwise it is extended (by a CHUNK more than needed) only if
-- its TTL, remembered in `marker`, falls short. Returns the new marker.
function F.keep_until(key, at, fresh, marker)
  if fresh then
    redis.call('PEXPIREAT', key, at + MARGIN + CHUNK)
    return at + MARGIN + CHUNK
  end
  if at + MARGIN <= marker then return marker end
  redis.call('PEXPIREAT', key, at + MARGIN + CHUNK, 'GT')
  return at + MARGIN + CHUNK
end

function F.finish()
  if S.h_top > 0 and not S.inline then S.T = F.keep_until(S.KH, S.h_top, S.h_fresh, S.T) end
  if S.w_top > 0 then S.U = F.keep_until(S.KQ, S.w_top, S.q_fresh, S.U) end
  -- Side data lives as long as the longest of holders and line.
  if S.p_touched or S.w_top > 0 or (F.holder_side() + S.a > 0 and S.h_top > 0) then
    S.V = F.keep_until(S.KP, math.max(S.h_top, S.w_top, S.now), S.p_fresh, S.V)
  end
  S.W = S.waiting
  local changed, k = {}, 0
  local function put(name, v, was_v)
    if v ~= nil and v ~= was_v then
      changed[k + 1], changed[k + 2] = name, v
      k = k + 2
    end
  end
  put('f', S.f, was.f) put('b', S.b, was.b) put('x', S.x, was.x) put('s', S.s, was.s)
  put('n', S.n, was.n) put('W', S.W, was.W) put('z', S.z, was.z) put('U', S.U, was.U)
  put('V', S.V, was.V) put('r', S.r, was.r) put('l', S.l, was.l) put('a', S.a, was.a)
  put('A', S.A, was.A) put('Y', S.Y, was.Y) put('Q', S.Q, was.Q) put('N', S.N, was.N)
  -- Permits freed and left free with nobody in line: barging waiters
  -- (until N) may take them.
  if S.freed and S.N > S.now and S.cap and S.waiting == 0 and F.used() < S.cap and F.may_admit() then
    wake_barging(S.cap - F.used())
  end
  if S.holders == 0 then S.X = 0 end
  put('X', S.X, was.X)
  if S.inline then
    -- Inline holders: H is 0, e, o and T are read from h, and u (the
    -- permits they hold) kept for the fast paths.
    put('H', 0, was.H)
    put('u', F.used(), tonumber(raw[12]) or 0)
    if S.h_changed then put('h', F.inline_text(S.held), raw[3]) end
  else
    S.H = S.holders
    put('e', S.e, was.e) put('o', S.o, was.o) put('H', S.H, was.H) put('T', S.T, was.T)
    -- (Holders just moved to the sorted set leave h empty.)
    if S.h_changed then put('h', '', raw[3]) end
  end
  -- State created by this call (m written for the first time, here or by
  -- the operation's body) gets its epoch. EXISTS costs a call only while
  -- m has no epoch: a gate that has no state, or state from before epochs.
  -- (HMGET answers false, not nil, for a field that is not there.)
  local exists = raw[9] ~= false
  if not exists and (k > 0 or redis.call('EXISTS', S.KM) == 1) then
    changed[k + 1], changed[k + 2] = 'E', new_epoch()
    k = k + 2
    exists = true
  end
  -- m lives IDLE past every deadline, and past this call if it changed
  -- something (only if m exists: a read of a gate without state must not
  -- create it).
  local last = math.max(S.T, S.U, S.V, S.A, S.r_top, S.h_top)
  if k > 0 or S.wrote_meta then last = math.max(last, S.now) end
  local meta_until = exists and meta_expiry(last, raw[10])
  if meta_until then
    changed[k + 1], changed[k + 2] = 'G', meta_until
    k = k + 2
  end
  -- k: the fast paths must leave this gate to the general path (holders on
  -- the sorted set, labels, a multi-permit waiter, admission control, or
  -- a sweep under way). Set before any of these is written; a k left set
  -- by a fast path that could not tell is cleared here.
  local complex = S.H > 0 and not S.inline or S.n > 0 or S.a > 0 or S.P ~= 0 or S.R ~= 0 or S.Y ~= '0'
  if complex and not raw[4] then
    changed[k + 1], changed[k + 2] = 'k', 1
    k = k + 2
  elseif not complex and raw[4] then
    redis.call('HDEL', S.KM, 'k')
  end
  if k > 0 then redis.call('HSET', S.KM, unpack(changed)) end
  if meta_until then redis.call('PEXPIREAT', S.KM, meta_until) end
end

function F.done(reply)
  F.finish()
  return reply
end

F.expire()
F.promote()

-- The helpers the operation's body calls (plain locals of the main chunk:
-- no closure captures them).
local done, promote, next_fence, add_holder, set_expiry, set_deadline, eta, used, may_admit, admitted,
  lookup, remove_holder, set_fence, drop_ticket, permits_of, note_side_data =
  F.done, F.promote, F.next_fence, F.add_holder, F.set_expiry, F.set_deadline, F.eta, F.used, F.may_admit,
  F.admitted, F.lookup, F.remove_holder, F.set_fence, F.drop_ticket, F.permits_of, F.note_side_data
