--- @include "lone_enter.lua"
--- @include "meta.lua"
--- @needs KM, base, MARGIN, CHUNK, INLINE, now, A, lone_read, lone_tried, clock, raw, read_meta, new_epoch, meta_expiry
-- enter_fast.lua: a gate whose holders are inline (capacity up to INLINE)
-- and that needs nothing of the general path (no k: no admission control,
-- labels, multi-permit waiter or sweep under way; and no stale ticket due
-- to be swept) grants a plain request, or queues a single-permit one:
-- TIME, read_meta()'s read and one write of m (plus ZADD q and HSET p when
-- queueing).
-- A request that is not queued gets its busy answer here too.
-- ARGV as enter.lua. Reply as enter.lua, or falls through.
-- Invariant: identical outcome to enter.lua for the same state.
-- After lone_enter.lua: a gate that looked free may hold a lone lease,
-- which becomes an inline holder first; a gate of one permit that did
-- not look free holds none, and only the rest of read_meta()'s fields are
-- read (raw's order, see meta.lua), rather than all 13 again.
clock()
if lone_tried then
  -- (read_meta() moves a lone lease into h: the gate has capacity 1.)
  read_meta()
elseif lone_read and lone_read[1] == '1' then
  local one = lone_read
  local more
  if A[6] == '1' then
    -- (A request that may queue, on a gate held: the line's fields too.)
    more = redis.call('HMGET', KM, 'z', 'r', 'l', 'u', 'X', 's', 'U', 'V')
  else
    more = redis.call('HMGET', KM, 'z', 'r', 'l', 'u', 'X')
  end
  raw = {one[1], one[7], one[2], one[3], one[4], more[1], more[2], more[3], one[5], one[9], one[6], more[4], more[5],
    one[8], more[6], more[7], more[8]}
else
  read_meta(A[6] == '1')
end
local fast_c, fast_asked = tonumber(raw[1]), tonumber(A[3])
local fast_cap = fast_c or fast_asked
if fast_cap > 0 and fast_cap <= INLINE and (fast_asked == 0 or fast_asked == fast_cap) and A[7] == ''
  and not raw[4] then
  local permits, ttl = tonumber(A[2]), tonumber(A[4])
  -- No inline lease has ended (X is no later than the first end), and u
  -- counts their permits.
  local h, used, X = raw[3] or '', tonumber(raw[12]) or 0, tonumber(raw[13]) or 0
  local live = h == '' or used > 0 and X > now
  local waiting = tonumber(raw[5]) or 0
  if live and permits <= fast_cap and waiting == 0 and used + permits <= fast_cap then
    local f, b, floor = tonumber(raw[2]) or 0, tonumber(raw[14]) or 0, now * 1000
    local ends = now + ttl
    -- (As next_fence() in general_grant.lua.)
    if f < floor then f, b = floor, b + floor - f end
    f = f + 1
    local entry = string.format('%s %d 0 %d', A[1], ends, permits)
    if h ~= '' then entry = h .. ',' .. entry end
    if h == '' or ends < X then X = ends end
    -- (Numbers go to Redis as text made here: '%d' costs less than the
    -- conversion redis.call makes of a number.)
    local fs, bs, Xs, meta_until = string.format('%d', f), string.format('%d', b), string.format('%d', X),
      meta_expiry(ends, raw[10])
    if fast_c and raw[9] and not meta_until then
      -- The common case: one more lease on a live gate.
      redis.call('HSET', KM, 'h', entry, 'f', fs, 'b', bs, 'u', used + permits, 'X', Xs)
      return {1, f, ttl}
    end
    local fields = {'h', entry, 'f', fs, 'b', bs, 'u', used + permits, 'X', Xs}
    if not fast_c then fields[#fields + 1], fields[#fields + 2] = 'c', fast_asked end
    -- The gate's state is created here (or predates epochs): give it one.
    if not raw[9] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
    if meta_until then fields[#fields + 1], fields[#fields + 2] = 'G', meta_until end
    redis.call('HSET', KM, unpack(fields))
    if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
    return {1, f, ttl}
  end
  local z = tonumber(raw[6]) or 0
  if live and permits <= fast_cap and A[6] ~= '1' and (waiting == 0 or z > now) then
    -- Busy (as enter.lua); a barging waiter says it waits until N.
    local hb = tonumber(A[5])
    if A[8] == '1' and (tonumber(raw[11]) or 0) < now + math.floor(hb / 2) then
      local meta_until = meta_expiry(now + hb, raw[10])
      if meta_until then
        redis.call('HSET', KM, 'N', now + hb, 'G', meta_until)
        redis.call('PEXPIREAT', KM, meta_until)
      else
        redis.call('HSET', KM, 'N', now + hb)
      end
    end
    return {3, used, fast_cap, waiting}
  end
  if live and A[6] == '1' and permits == 1 and used >= fast_cap and (z == 0 or z > now) then
    -- Full: into the line (as enter.lua's queueing and set_deadline()).
    -- (The line's fields, which only queueing needs: read with read_meta()'s
    -- when the request may queue, see read_meta().)
    local cold = {raw[15], raw[16], raw[17]}
    if raw[15] == nil then cold = redis.call('HMGET', KM, 's', 'U', 'V') end
    local KQ, KP = base .. 'q', base .. 'p'
    --- @inline "line_join.lua" id=A[1], hb=A[5], s0=cold[1], U0=cold[2], V0=cold[3], waiting=waiting, z=z, first=waiting == 0, kq=KQ, kp=KP
    if not raw[9] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
    local meta_until = meta_expiry(math.max(U, V), raw[10])
    if meta_until then fields[#fields + 1], fields[#fields + 2] = 'G', meta_until end
    redis.call('HSET', KM, unpack(fields))
    if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
    local position, r = waiting + 1, tonumber(raw[7])
    return {2, position, position, r and position * r or -1}
  end
end
