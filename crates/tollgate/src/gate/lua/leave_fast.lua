--- @include "lone_leave.lua"
--- @include "pass_on.lua"
--- @needs KM, base, now, lone_entry, absorb, clock, raw, read_meta, new_epoch, meta_expiry, wake_barging, inline_entry, inline_find, pass_on
-- leave_fast.lua: releasing a live inline lease (capacity up to INLINE)
-- without the general path, when no lease has ended and the gate needs
-- nothing of it (no k, see enter_fast.lua); with a line, the freed permits
-- go to its head at once (as promote() does) unless a stale ticket is due
-- to be swept.
-- ARGV as leave.lua (ARGV[2] may be empty for a plain leave; ARGV[3] '1'
-- or 'L' (see leave_line.lua):
-- the caller's gate has one permit; ARGV[4..6] a pass). Reply as
-- leave.lua, or falls through (also for an end, which the general path
-- records).
-- Invariant: identical outcome to leave.lua for the same state.
-- A gate of one permit (the caller's hint ARGV[3], checked against c)
-- whose only holder leaves with no line, no barging waiter and nothing
-- for the general path: 6 fields read instead of read_meta()'s 13, the
-- writes of the release below.
local plain = (ARGV[2] or '') == ''
local fast_pass = ARGV[4]
if fast_pass == '' then fast_pass = nil end
-- After lone_leave.lua: a lone lease it did not release becomes an
-- inline holder first.
if lone_entry then absorb(lone_entry) end
clock()
if plain and fast_pass then
  -- A pass alone (pass_on.lua): a chain of passes on a gate of 5, piped,
  -- 10.6 µs of Redis CPU each (10.1 with this code inline here, before
  -- pass_many.lua shared it: one code path for both is worth 0.5 µs).
  local made = pass_on({ARGV[1], fast_pass, ARGV[5], ARGV[6]})
  if made[1] then return {3, made[1], made[2]} end
  read_meta()
elseif plain and (ARGV[3] == '1' or ARGV[3] == 'L') then
  local one = redis.call('HMGET', KM, 'c', 'h', 'k', 'W', 'N', 'E')
  if one[1] == '1' and not one[3] and (tonumber(one[4]) or 0) == 0 and (tonumber(one[5]) or 0) <= now
    and one[6] then
    local id, ends = string.match(one[2] or '', '^(%w+) (%d+) %-?%d+ 1$')
    if id == ARGV[1] and tonumber(ends) > now then
      redis.call('HSET', KM, 'h', '', 'u', 0, 'X', '0')
      return {1}
    end
  end
  -- The rest of read_meta()'s fields (raw's order, see meta.lua).
  local more = redis.call('HMGET', KM, 'f', 'z', 'r', 'l', 'G', 'u', 'X', 'b')
  raw = {one[1], more[1], one[2], one[3], one[4], more[2], more[3], more[4], one[6], more[5], one[5], more[6], more[7],
    more[8]}
else
  read_meta()
end
local fast_h = raw[3] or ''
if plain and not fast_pass and not raw[4] and fast_h ~= '' then
  local used, X = tonumber(raw[12]) or 0, tonumber(raw[13]) or 0
  local i, j = inline_find(fast_h, ARGV[1])
  local waiting, z = tonumber(raw[5]) or 0, tonumber(raw[6]) or 0
  if i and used > 0 and X > now and (waiting == 0 or z > now) then
    local permits = tonumber(string.match(string.sub(fast_h, i, j), '(%d+)$'))
    -- Cut the entry and its comma out.
    local h
    if i == 1 then h = string.sub(fast_h, j + 2) else h = string.sub(fast_h, 1, i - 2) .. string.sub(fast_h, j + 1) end
    local before = used
    used = used - permits
    local fields, meta_until, reply = {}, nil, {1}
    local cap, f, b = tonumber(raw[1]), tonumber(raw[2]) or 0, tonumber(raw[14]) or 0
    if waiting > 0 then
      local KQ, KP = base .. 'q', base .. 'p'
      local handed, last, fs = {}, 0, nil
      -- The line's pace, for the estimated wait (as line_moved() in
      -- general_line.lua, once per grant from the line).
      local r, l = tonumber(raw[7]), tonumber(raw[8]) or 0
      while waiting > 0 and used < cap do
        local head = redis.call('ZPOPMIN', KQ)[1]
        if not head then break end
        -- The hand-off lives until the waiter's heartbeat deadline.
        local deadline = tonumber(redis.call('HGET', KP, 'd:' .. head)) or now
        redis.call('HDEL', KP, 'd:' .. head)
        -- (As next_fence() in general_grant.lua.)
        if f < now * 1000 then f, b = now * 1000, b + now * 1000 - f end
        f = f + 1
        local entry = inline_entry(head, deadline, -f, 1)
        if h == '' then h = entry else h = h .. ',' .. entry end
        if deadline < X then X = deadline end
        used, waiting = used + 1, waiting - 1
        if deadline > last then last = deadline end
        fs = string.format('%d', f)
        handed[#handed + 1] = head .. ':' .. fs
        reply[#reply + 1] = handed[#handed]
        --- @inline "line_pace.lua" r=r, l=l, now=now
        l = now
      end
      if #handed > 0 then
        redis.call('PUBLISH', base .. 'n', table.concat(handed, ' '))
        fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'f', fs, 'W', waiting
        fields[#fields + 1], fields[#fields + 2] = 'b', string.format('%d', b)
        fields[#fields + 1], fields[#fields + 2] = 'l', string.format('%d', now)
        if r ~= nil then fields[#fields + 1], fields[#fields + 2] = 'r', r end
        meta_until = meta_expiry(last, raw[10])
      end
    end
    if meta_until then fields[#fields + 1], fields[#fields + 2] = 'G', meta_until end
    -- (X stays no later than the first end; with no holder left it is 0.)
    local Xs = used == 0 and '0' or string.format('%d', X)
    -- Permits freed and left free with nobody in line: barging waiters
    -- may take them.
    if (tonumber(raw[11]) or 0) > now and waiting == 0 and used < before and used < cap then
      wake_barging(cap - used)
    end
    if #fields == 0 and raw[9] then
      -- The common case: a plain release with no line.
      redis.call('HSET', KM, 'h', h, 'u', used, 'X', Xs)
      return reply
    end
    fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'h', h, 'u', used
    fields[#fields + 1], fields[#fields + 2] = 'X', Xs
    if not raw[9] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
    redis.call('HSET', KM, unpack(fields))
    if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
    return reply
  end
end
