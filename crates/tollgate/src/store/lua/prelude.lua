-- prelude.lua: prepended to every gate script. It reads server time, expires
-- what ended, hands free permits to the head of the line, and at the end
-- writes the meta hash back once and keeps key TTLs past every deadline.
--
-- Keys of one gate, all under one hash tag so the scripts run on Cluster:
--   KEYS[1] m  HASH  c capacity, f last fence, g grants, x expiries, s line
--                    seq, e extra permits held (sum of permits-1 over
--                    holders), n waiters asking for more than one permit,
--                    o holders that came by hand-off. The only key an idle
--                    gate keeps: it carries the fence, which never goes back.
--   KEYS[2] h  ZSET  holders: lease id -> expiry (ms, server time)
--   KEYS[3] p  HASH  k:<id> permits (only when > 1); f:<id> fence of a lease
--                    handed to a waiter, negative until the waiter picks it up
--   KEYS[4] q  ZSET  the line: ticket id -> seq (INCR order, never time)
--   KEYS[5] w  ZSET  heartbeats: ticket id -> deadline (ms, server time)
-- Hand-offs are published on the channel named like KEYS[1] with the final
-- "m" replaced by "n"; the message is the space-separated ticket ids.
--
-- Invariants: permits held (ZCARD h + e) never exceed c, except after c was
-- lowered (holders are never evicted); nobody is granted while a ticket ahead
-- of them waits; fences strictly increase per gate.
local KM, KH, KP, KQ, KW = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local MARGIN = 1000

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local meta = redis.call('HMGET', KM, 'c', 'f', 'g', 'x', 's', 'e', 'n', 'o')
local cap = tonumber(meta[1])
local fence = tonumber(meta[2]) or 0
local grants = tonumber(meta[3]) or 0
local expiries = tonumber(meta[4]) or 0
local seq = tonumber(meta[5]) or 0
local extra = tonumber(meta[6]) or 0
local multi = tonumber(meta[7]) or 0
local handoffs = tonumber(meta[8]) or 0

local meta_dirty, holders_dirty, line_dirty, side_dirty = false, false, false, false
local holders, waiting = 0, 0

local function next_fence()
  -- Fences start from the clock, so they keep growing even if Redis loses
  -- the meta hash (a restart without persistence), as long as time does.
  if fence == 0 then fence = now * 1000 end
  fence = fence + 1
  grants = grants + 1
  meta_dirty = true
  return fence
end

local function used()
  return holders + extra
end

local function waiter_permits(id)
  if multi == 0 then return 1 end
  return tonumber(redis.call('HGET', KP, 'k:' .. id)) or 1
end

-- Forgets a holder's side data; returns its permits.
local function forget_holder(id)
  local k = 1
  if extra > 0 then
    k = tonumber(redis.call('HGET', KP, 'k:' .. id)) or 1
    extra = extra - (k - 1)
  end
  if extra > 0 or k > 1 or handoffs > 0 then
    if handoffs > 0 and redis.call('HDEL', KP, 'f:' .. id) == 1 then
      handoffs = handoffs - 1
    end
    redis.call('HDEL', KP, 'k:' .. id)
  end
  meta_dirty = true
  return k
end

local function drop_ticket(id)
  if redis.call('ZREM', KQ, id) == 0 then return false end
  redis.call('ZREM', KW, id)
  if multi > 0 and redis.call('HDEL', KP, 'k:' .. id) == 1 then
    multi = multi - 1
    meta_dirty = true
  end
  waiting = waiting - 1
  line_dirty = true
  return true
end

local function expire()
  local ended = redis.call('ZRANGEBYSCORE', KH, '-inf', now)
  if #ended > 0 then
    redis.call('ZREMRANGEBYSCORE', KH, '-inf', now)
    for _, id in ipairs(ended) do forget_holder(id) end
    expiries = expiries + #ended
    meta_dirty = true
  end
  holders = redis.call('ZCARD', KH)
  if holders == 0 and (extra ~= 0 or handoffs ~= 0) then
    -- The holders key expired as a whole: its side counters are stale.
    extra, handoffs, meta_dirty = 0, 0, true
  end
  waiting = redis.call('ZCARD', KQ)
  if waiting == 0 then
    if multi ~= 0 then multi, meta_dirty = 0, true end
    return
  end
  local stale = redis.call('ZRANGEBYSCORE', KW, '-inf', now)
  for _, id in ipairs(stale) do drop_ticket(id) end
end

-- Grants free permits to the head of the line while the head fits.
local function promote()
  if cap == nil or waiting == 0 then return end
  local handed = {}
  while waiting > 0 do
    local head = redis.call('ZRANGE', KQ, 0, 0)[1]
    if not head then break end
    local k = waiter_permits(head)
    if k > cap then
      -- Capacity was lowered below what this ticket needs: it can never be
      -- served and must not block the line behind it.
      drop_ticket(head)
    elseif used() + k > cap then
      break
    else
      -- The hand-off lives only until the waiter's heartbeat deadline: a
      -- vanished waiter gives it back within its grace, not a whole TTL.
      local deadline = redis.call('ZSCORE', KW, head)
      redis.call('ZREM', KQ, head)
      redis.call('ZREM', KW, head)
      waiting = waiting - 1
      if k > 1 then
        multi = multi - 1
        extra = extra + k - 1
      end
      local f = next_fence()
      redis.call('ZADD', KH, deadline, head)
      redis.call('HSET', KP, 'f:' .. head, -f)
      handoffs = handoffs + 1
      holders = holders + 1
      holders_dirty, line_dirty, side_dirty = true, true, true
      handed[#handed + 1] = head
    end
  end
  if #handed > 0 then
    redis.call('PUBLISH', string.sub(KM, 1, -2) .. 'n', table.concat(handed, ' '))
  end
end

local function top_score(key)
  local r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if r[2] then return tonumber(r[2]) end
  return 0
end

-- Writes meta back and keeps every key alive past its last deadline, so a
-- gate nobody touches again leaves only its meta hash behind.
local function finish()
  if meta_dirty then
    redis.call('HSET', KM, 'f', fence, 'g', grants, 'x', expiries, 's', seq,
      'e', extra, 'n', multi, 'o', handoffs)
  end
  local htop, wtop = 0, 0
  if holders_dirty or side_dirty then
    htop = top_score(KH)
    if holders_dirty and htop > 0 then redis.call('PEXPIREAT', KH, htop + MARGIN) end
  end
  if line_dirty or side_dirty then
    wtop = top_score(KW)
    if line_dirty and wtop > 0 then
      redis.call('PEXPIREAT', KQ, wtop + MARGIN)
      redis.call('PEXPIREAT', KW, wtop + MARGIN)
    end
  end
  if side_dirty then
    local top = math.max(htop, wtop)
    if top > 0 then redis.call('PEXPIREAT', KP, top + MARGIN) end
  end
end

local function done(reply)
  finish()
  return reply
end

expire()
promote()
