-- prelude.lua: the general path of every gate script. It expires
-- what ended, hands free permits to the head of the line, and at the end
-- writes back what changed in the meta hash and keeps key TTLs past every
-- deadline in them.
--
-- (Server time and the meta hash were read by head.lua.)
--
-- Keys of one gate, all under one hash tag so the scripts run on Cluster:
--   KEYS[1] m  HASH  c capacity, f last fence, b first fence minus one
--                    (grants = f - b), x expiries, s line seq, e extra
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
--                    departures (releases and expiries, ms, a moving
--                    average) and l the last departure: a waiter's estimated
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
--                    (ms); C the last reset of the line (ms, admin.lua).
--                    m lives IDLE (the store's idle period) past the last
--                    deadline any key holds (the TTLs set on h, q, p and
--                    r, the next admission) and the last write, so an
--                    idle gate leaves no key behind; the cost is one
--                    PEXPIREAT per IDLE / 4 of activity. Its settings
--                    (capacity, pause, admission interval) go with it:
--                    whoever configures a gate watches its epoch and sets
--                    them again. Fences need no key to survive: they
--                    start from server time x 1000 and a gate cannot
--                    grant 1,000 leases a millisecond, so a new state's
--                    first fence is above every old one.
--   KEYS[2] h  ZSET  holders: lease id -> expiry (ms, server time)
--   KEYS[3] p  HASH  d:<id> heartbeat deadline of a waiting ticket (ms);
--                    L:<id> label given at entry (counted in m's a);
--                    k:<id> permits (only when > 1); f:<id> fence of a lease
--                    handed to a waiter, negative until the waiter picks it up
--   KEYS[4] q  ZSET  the line: ticket id -> seq (a counter, never time)
--   KEYS[5] r  ZSET  the revocation log: token of a holder that ended
--                    (leave.lua with a keep) -> now * 1024 at the end, or
--                    one more than the last score (Z) if that is more, so
--                    scores strictly increase and are a reader's cursor;
--                    entries older than K are pruned by later ends and
--                    never read (watch.lua); the key lives K past the last
--                    end.
-- Deadlines sit in a hash rather than a second sorted set to keep a waiting
-- ticket under 200 bytes; finding stale tickets then takes a scan of p, done
-- only once the earliest possible deadline (z) has passed. A short line is
-- scanned whole at once; a long one in steps of SWEEP_STEP entries, one step
-- per operation, resuming from the cursor Y, with Q the earliest deadline
-- seen (or set) during the pass, which becomes z when the pass ends. So no
-- operation touches more than a bounded slice of a line of any length.
-- Hand-offs are published on the channel named like KEYS[1] with the final
-- "m" replaced by "n"; the message is space-separated "<ticket id>:<fence>".
--
-- Invariants: permits held (#h + e) never exceed c, except after c was
-- lowered (holders are never evicted); nobody is granted while a ticket ahead
-- of them waits; fences strictly increase per gate; every key but m carries
-- a TTL beyond the last deadline it holds, and m one IDLE beyond theirs.
-- head.lua (and possibly a fast path) ran before this: KM..KQ, MARGIN,
-- SMALL, now and raw (the meta fields) are already set.
local cap = tonumber(raw[1])
local Mf, Mb, Mx = tonumber(raw[2]) or 0, tonumber(raw[3]) or 0, tonumber(raw[4]) or 0
local Ms, Me, Mn = tonumber(raw[5]) or 0, tonumber(raw[6]) or 0, tonumber(raw[7]) or 0
local Mo, MH, MW, Mz = tonumber(raw[8]) or 0, tonumber(raw[9]) or 0, tonumber(raw[10]) or 0, tonumber(raw[11]) or 0
local MT, MU, MX, MV = tonumber(raw[12]) or 0, tonumber(raw[13]) or 0, tonumber(raw[14]) or 0,
  tonumber(raw[15]) or 0
-- r is absent (nil) until a first gap between departures was measured.
local Mr, Ml = tonumber(raw[16]), tonumber(raw[17]) or 0
-- a: labels stored in p (holders and waiters); 0 lets removals skip a call.
local Ma = tonumber(raw[18]) or 0
-- The stale-ticket sweep of a long line: cursor ('0' or absent: none under
-- way) and the earliest deadline seen in the pass so far.
local MY, MQ = raw[22] or '0', tonumber(raw[23]) or 0
local was_Y, was_Q = MY, MQ
local SWEEP_ALL, SWEEP_STEP = 512, 256
-- At most this many ended leases are removed per call, the earliest
-- first: a gate where a huge number ended at once sheds them over several
-- calls, none of which blocks Redis for long. Until then X stays at or
-- before now, so the next call looks again; an ended lease still counts
-- as held (its permits are not granted again), which is safe, and
-- expire_one keeps it from being renewed, released or picked up.
local EXPIRE_STEP = 1000
-- Admission control (written by set_admission.lua, A also here).
local MP, MR, MA = tonumber(raw[19]) or 0, tonumber(raw[20]) or 0, tonumber(raw[21]) or 0
local was_A = MA
local was_f, was_b, was_x, was_s, was_e, was_n, was_o, was_H, was_W, was_z, was_T, was_U, was_X, was_V =
  Mf, Mb, Mx, Ms, Me, Mn, Mo, MH, MW, Mz, MT, MU, MX, MV
local was_r, was_l, was_a = Mr, Ml, Ma

-- Latest expiry written to h / deadline written to p by this call (0: none),
-- and whether those keys may lack a TTL (empty before, or emptied since).
local h_top, w_top, p_touched = 0, 0, false
-- The expiry set on r by this call (an end), 0: none; and whether the
-- body wrote m itself (settings): with any change to m, that makes this
-- call activity, which keeps m IDLE past now too. Reads are not activity.
local r_top, wrote_meta = 0, false
local h_fresh, q_fresh, p_fresh = true, true, true
local holders, waiting = 0, 0

local function next_fence()
  -- Fences start from the clock, so they keep growing even if Redis loses
  -- the meta hash (a restart without persistence), as long as time does.
  -- The same rule as GateState::grant in src/store/gate/memory.rs.
  if Mf == 0 then
    Mf = now * 1000
    Mb = Mf
  end
  Mf = Mf + 1
  return Mf
end

-- Records `n` departures now, for the estimated wait (as GateState::depart
-- in src/store/gate/memory.rs).
local function depart(n)
  for _ = 1, n do
    if Ml > 0 then
      local gap = now - Ml
      if Mr == nil then Mr = gap else Mr = math.floor(Mr * 0.8 + gap * 0.2 + 0.5) end
    end
    Ml = now
  end
end

-- A waiter's estimated wait, -1 until two departures have been seen (as
-- GateState::eta in src/store/gate/memory.rs).
local function eta(position)
  if Mr == nil then return -1 end
  return position * Mr
end

local function used()
  return holders + Me
end

local function permits_of(id, any_multi)
  if not any_multi then return 1 end
  return tonumber(redis.call('HGET', KP, 'k:' .. id)) or 1
end

-- p holds side data only while someone waits, holds several permits or
-- holds a hand-off; once none does, Redis has deleted it (and its TTL).
local function note_side_data()
  if waiting == 0 and Me == 0 and Mo == 0 and Ma == 0 then p_fresh = true end
end

-- Forgets the label of a departed holder or ticket.
local function forget_label(id)
  if Ma > 0 and redis.call('HDEL', KP, 'L:' .. id) == 1 then Ma = Ma - 1 end
end

-- Forgets a departed holder's side data.
local function forget_holder(id)
  if Me > 0 then
    Me = Me - (permits_of(id, true) - 1)
    redis.call('HDEL', KP, 'k:' .. id)
  end
  if Mo > 0 and redis.call('HDEL', KP, 'f:' .. id) == 1 then
    Mo = Mo - 1
  end
  forget_label(id)
  note_side_data()
end

local function drop_ticket(id)
  if redis.call('ZREM', KQ, id) == 0 then return false end
  if redis.call('HDEL', KP, 'd:' .. id, 'k:' .. id) == 2 then Mn = Mn - 1 end
  forget_label(id)
  waiting = waiting - 1
  if waiting == 0 then q_fresh = true end
  note_side_data()
  return true
end

-- Moves a held lease's end (renewal, or a waiter picking up a hand-off,
-- which may shorten it). X must stay a lower bound of every lease's end.
local function set_expiry(id, expires)
  redis.call('ZADD', KH, 'XX', expires, id)
  if expires > h_top then h_top = expires end
  if MX == 0 or expires < MX then MX = expires end
end

local function add_holder(id, expires)
  redis.call('ZADD', KH, expires, id)
  holders = holders + 1
  if expires > h_top then h_top = expires end
  if MX == 0 or expires < MX then MX = expires end
end

local function set_deadline(id, deadline)
  redis.call('HSET', KP, 'd:' .. id, deadline)
  if Mz == 0 or deadline < Mz then Mz = deadline end
  -- A pass under way may not reach this field: count it in the pass.
  if MY ~= '0' and (MQ == 0 or deadline < MQ) then MQ = deadline end
  if deadline > w_top then w_top = deadline end
end

-- Drops the tickets in `all` (field, value, ...) whose deadline passed;
-- returns the earliest deadline left among them (0: none).
local function drop_stale(all)
  local earliest = 0
  for i = 1, #all, 2 do
    local field = all[i]
    if string.sub(field, 1, 2) == 'd:' then
      local d = tonumber(all[i + 1])
      if d <= now then
        drop_ticket(string.sub(field, 3))
      elseif earliest == 0 or d < earliest then
        earliest = d
      end
    end
  end
  return earliest
end

-- Drops tickets whose deadline passed, and learns the earliest left: all
-- at once for a short line, one bounded step of a pass for a long one.
local function sweep()
  if waiting <= SWEEP_ALL and MY == '0' then
    Mz = drop_stale(redis.call('HGETALL', KP))
    return
  end
  local step = redis.call('HSCAN', KP, MY, 'COUNT', SWEEP_STEP)
  local earliest = drop_stale(step[2])
  if earliest > 0 and (MQ == 0 or earliest < MQ) then MQ = earliest end
  MY = step[1]
  if MY == '0' then
    -- The pass is over: every deadline still in p is at least MQ.
    Mz, MQ = MQ, 0
  end
end

local function expire()
  -- H is exact while h exists, and no lease ends before X: until then
  -- there is nothing to expire and h need not be read. (h can only have
  -- expired whole after its last lease ended, which X <= now reveals.)
  if MH > 0 and MX > now then
    holders = MH
    h_fresh = false
  elseif MH > 0 then
    local ended = {}
    local earliest = 0
    if MH <= SMALL then
      local all = redis.call('ZRANGE', KH, 0, -1, 'WITHSCORES')
      for i = 1, #all, 2 do
        local expires = tonumber(all[i + 1])
        if expires <= now then
          ended[#ended + 1] = all[i]
        elseif earliest == 0 or expires < earliest then
          earliest = expires
        end
      end
      holders = #all / 2
    else
      local due = redis.call('ZRANGEBYSCORE', KH, '-inf', now, 'WITHSCORES', 'LIMIT', 0, EXPIRE_STEP + 1)
      for i = 1, math.min(#due, 2 * EXPIRE_STEP), 2 do ended[#ended + 1] = due[i] end
      holders = redis.call('ZCARD', KH)
      if #due > 2 * EXPIRE_STEP then
        -- More ended than one call removes: the rest from this one on.
        earliest = tonumber(due[#due])
      else
        local first = redis.call('ZRANGEBYSCORE', KH, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        if first[2] then earliest = tonumber(first[2]) end
      end
    end
    MX = earliest
    if holders > 0 then h_fresh = false end
    if #ended > 0 then
      for _, id in ipairs(ended) do
        redis.call('ZREM', KH, id)
        forget_holder(id)
      end
      holders = holders - #ended
      if holders == 0 then h_fresh = true end
      Mx = Mx + #ended
      depart(#ended)
    end
  end
  if holders == 0 then
    -- Nothing holds: side counters left by a key that expired whole are stale.
    Me, Mo, MX = 0, 0, 0
  end
  if MW > 0 then
    -- W is exact while q exists; q can only have expired whole once every
    -- deadline in it passed, which z <= now reveals, so count only then.
    waiting = MW
    if Mz <= now then
      waiting = redis.call('ZCARD', KQ)
      if waiting > 0 then sweep() end
    end
    q_fresh = waiting == 0
  end
  if waiting == 0 then Mn, Mz, MY, MQ = 0, 0, '0', 0 end
  -- Nobody holds or waits: a label count left by keys that expired is stale.
  if holders == 0 and waiting == 0 then Ma = 0 end
  p_fresh = waiting == 0 and Me == 0 and Mo == 0 and Ma == 0
end

-- Removes holder `id` if its lease has ended (an expiry not swept yet:
-- see EXPIRE_STEP); returns whether it did. Operations on one lease call
-- this first, so such a lease is gone for them.
local function expire_one(id)
  local expires = holders > 0 and redis.call('ZSCORE', KH, id)
  if not expires or tonumber(expires) > now then return false end
  redis.call('ZREM', KH, id)
  holders = holders - 1
  if holders == 0 then h_fresh = true end
  forget_holder(id)
  Mx = Mx + 1
  depart(1)
  return true
end

-- Grants free permits to the head of the line while the head fits.
-- Whether admission control lets one more in now, and spending it.
local function may_admit()
  return MP ~= 1 and (MR == 0 or MA <= now)
end
local function admitted()
  if MR > 0 then MA = math.max(MA, now) + MR end
end

local function promote()
  if cap == nil or waiting == 0 then return end
  local handed = {}
  while waiting > 0 do
    -- With only single-permit tickets in line, a full gate needs no look,
    -- and a gate with room takes the head off the line in one call.
    local head, k, popped
    if Mn == 0 then
      if used() >= cap or not may_admit() then break end
      head, k, popped = redis.call('ZPOPMIN', KQ)[1], 1, true
    else
      head = redis.call('ZRANGE', KQ, 0, 0)[1]
      if head then k = permits_of(head, true) end
    end
    if not head then break end
    if k > cap then
      -- Capacity was lowered below what this ticket needs: it can never be
      -- served and must not block the line behind it.
      drop_ticket(head)
    elseif used() + k > cap or not may_admit() then
      break
    else
      admitted()
      -- The hand-off lives only until the waiter's heartbeat deadline: a
      -- vanished waiter gives it back within its grace, not a whole TTL.
      local deadline = tonumber(redis.call('HGET', KP, 'd:' .. head)) or now
      if not popped then redis.call('ZREM', KQ, head) end
      waiting = waiting - 1
      if waiting == 0 then q_fresh = true end
      if k > 1 then
        Mn = Mn - 1
        Me = Me + k - 1
      end
      local f = next_fence()
      add_holder(head, deadline)
      redis.call('HDEL', KP, 'd:' .. head)
      redis.call('HSET', KP, 'f:' .. head, -f)
      p_touched = true
      Mo = Mo + 1
      handed[#handed + 1] = head .. ':' .. string.format('%d', f)
    end
  end
  if #handed > 0 then
    redis.call('PUBLISH', string.sub(KM, 1, -2) .. 'n', table.concat(handed, ' '))
  end
end

-- Makes a key live past `at` + MARGIN. A key that may lack a TTL gets one
-- outright; otherwise it is extended (by a CHUNK more than needed) only if
-- its TTL, remembered in `marker`, falls short. Returns the new marker.
local function keep_until(key, at, fresh, marker)
  if fresh then
    redis.call('PEXPIREAT', key, at + MARGIN + CHUNK)
    return at + MARGIN + CHUNK
  end
  if at + MARGIN <= marker then return marker end
  redis.call('PEXPIREAT', key, at + MARGIN + CHUNK, 'GT')
  return at + MARGIN + CHUNK
end

local function finish()
  if h_top > 0 then MT = keep_until(KH, h_top, h_fresh, MT) end
  if w_top > 0 then MU = keep_until(KQ, w_top, q_fresh, MU) end
  -- Side data lives as long as the longest of holders and line.
  if p_touched or w_top > 0 or (Me + Mo + Ma > 0 and h_top > 0) then
    MV = keep_until(KP, math.max(h_top, w_top, now), p_fresh, MV)
  end
  MH, MW = holders, waiting
  local changed, k = {}, 0
  local function put(name, v, was_v)
    if v ~= nil and v ~= was_v then
      changed[k + 1], changed[k + 2] = name, v
      k = k + 2
    end
  end
  put('f', Mf, was_f) put('b', Mb, was_b) put('x', Mx, was_x) put('s', Ms, was_s)
  put('e', Me, was_e) put('n', Mn, was_n) put('o', Mo, was_o) put('H', MH, was_H)
  put('W', MW, was_W) put('z', Mz, was_z) put('T', MT, was_T) put('U', MU, was_U)
  if holders == 0 then MX = 0 end
  put('X', MX, was_X) put('V', MV, was_V) put('r', Mr, was_r) put('l', Ml, was_l) put('a', Ma, was_a)
  put('A', MA, was_A) put('Y', MY, was_Y) put('Q', MQ, was_Q)
  -- State created by this call (m written for the first time, here or by
  -- the operation's body) gets its epoch. EXISTS costs a call only while
  -- m has no epoch: a gate that has no state, or state from before epochs.
  -- (HMGET answers false, not nil, for a field that is not there.)
  local exists = raw[24] ~= false
  if not exists and (k > 0 or redis.call('EXISTS', KM) == 1) then
    changed[k + 1], changed[k + 2] = 'E', new_epoch()
    k = k + 2
    exists = true
  end
  -- m lives IDLE past every deadline, and past this call if it changed
  -- something (only if m exists: a read of a gate without state must not
  -- create it).
  local last = math.max(MT, MU, MV, MA, r_top)
  if k > 0 or wrote_meta then last = math.max(last, now) end
  local meta_until = exists and meta_expiry(last)
  if meta_until then
    changed[k + 1], changed[k + 2] = 'G', meta_until
    k = k + 2
  end
  if k > 0 then redis.call('HSET', KM, unpack(changed)) end
  if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
end

local function done(reply)
  finish()
  return reply
end

expire()
promote()
