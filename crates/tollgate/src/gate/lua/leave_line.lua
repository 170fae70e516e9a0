--- @include "keys.lua"
--- @include "line_write.lua"
--- @needs KM, base, t, now, line_write
-- leave_line.lua: a plain release by a Lock whose handle saw a line last
-- (ARGV[3] 'L', see GateName::lined), before lone_leave.lua and meta.lua:
-- the only holder of a gate of one permit hands it to the line's head.
-- As leave_fast.lua's hand-over, with nothing else built or read: TIME,
-- one HMGET of 13 fields, ZPOPMIN, HGET and HDEL of the head's deadline,
-- PUBLISH, HSET (a mutex's contended hand-over, on the chain of every
-- critical section: ~7 µs of Redis CPU less than leave_fast.lua's,
-- docs/BENCHMARKS.md). Anything else (no line, a stale ticket due, an
-- ended lease, a first fence, a gate without an epoch, anything for the
-- general path) falls through with nothing done, to the paths the
-- one-permit hint takes ('L' is that hint as well).
-- ARGV as leave.lua. Reply as leave.lua, or falls through.
-- Invariant: identical outcome to leave.lua for the same state.
if ARGV[3] == 'L' and (ARGV[2] or '') == '' and (ARGV[4] or '') == '' then
  -- (The clock as meta.lua's clock() reads it, which then reads no more.)
  t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local m = redis.call('HMGET', KM, 'c', 'f', 'h', 'k', 'W', 'z', 'r', 'l', 'E', 'G', 'u', 'X', 'b')
  local waiting, f, X = tonumber(m[5]) or 0, tonumber(m[2]) or 0, tonumber(m[12]) or 0
  if m[1] == '1' and not m[4] and m[9] and m[11] == '1' and waiting > 0 and (tonumber(m[6]) or 0) > now
    and f > 0 and X > now then
    -- The caller is the only holder, with its one permit, live.
    local id, ends = string.match(m[3] or '', '^(%w+) (%d+) %-?%d+ 1$')
    local head = id == ARGV[1] and tonumber(ends) > now and redis.call('ZPOPMIN', base .. 'q')[1]
    if head then
      local KP, dk = base .. 'p', 'd:' .. head
      -- The hand-off lives until the waiter's heartbeat deadline.
      local deadline = tonumber(redis.call('HGET', KP, dk)) or now
      redis.call('HDEL', KP, dk)
      -- (As next_fence() in general_grant.lua.)
      local b = tonumber(m[13]) or 0
      if f < now * 1000 then f, b = now * 1000, b + now * 1000 - f end
      f = f + 1
      local fs, ds = string.format('%d', f), string.format('%d', deadline)
      if deadline < X then X = deadline end
      local handed = head .. ':' .. fs
      redis.call('PUBLISH', base .. 'n', handed)
      local fields = {'f', fs, 'b', string.format('%d', b), 'W', waiting - 1, 'l', string.format('%d', now),
        'h', head .. ' ' .. ds .. ' -' .. fs .. ' 1', 'u', 1, 'X', string.format('%d', X)}
      -- The line's pace (as line_moved() in general_line.lua).
      local r, l = tonumber(m[7]), tonumber(m[8]) or 0
      --- @inline "line_pace.lua" r=r, l=l, now=now
      if r ~= nil then fields[#fields + 1], fields[#fields + 2] = 'r', r end
      -- m outlives the hand-off by IDLE.
      line_write(fields, deadline, m[10])
      return {1, handed}
    end
  end
end
