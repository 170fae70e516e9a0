-- leave_fast.lua: releasing a live inline lease (capacity up to INLINE)
-- without the general path, when no lease has ended and the gate needs
-- nothing of it (no k, see enter_fast.lua); with a line, the freed permit
-- goes to its head at once (as promote() does) unless a stale ticket is
-- due to be swept.
-- ARGV as leave.lua. Reply: {1, hand-offs...} released (as leave.lua), or
-- falls through (also for an end, which the general path records).
-- Invariant: identical outcome to leave.lua for the same state.
if not ARGV[2] and not raw[4] and raw[3] and raw[3] ~= '' then
  local held = inline_holders(raw[3])
  local mine, live = nil, true
  for i, x in ipairs(held) do
    if x[2] <= now then live = false end
    if x[1] == ARGV[1] then mine = i end
  end
  local waiting, z = tonumber(raw[5]) or 0, tonumber(raw[7]) or 0
  if mine and live and (waiting == 0 or z > now) then
    table.remove(held, mine)
    local fields, meta_until, reply = {}, nil, {1}
    if waiting > 0 then
      local cap, used, f = tonumber(raw[1]), 0, tonumber(raw[2]) or 0
      for _, x in ipairs(held) do used = used + x[4] end
      local handed, last = {}, 0
      while waiting > 0 and used < cap do
        local head = redis.call('ZPOPMIN', KQ)[1]
        if not head then break end
        -- The hand-off lives until the waiter's heartbeat deadline.
        local deadline = tonumber(redis.call('HGET', KP, 'd:' .. head)) or now
        redis.call('HDEL', KP, 'd:' .. head)
        if f == 0 then
          f = now * 1000
          fields[#fields + 1], fields[#fields + 2] = 'b', f
        end
        f = f + 1
        held[#held + 1] = {head, deadline, -f, 1}
        used, waiting = used + 1, waiting - 1
        if deadline > last then last = deadline end
        handed[#handed + 1] = head .. ':' .. string.format('%d', f)
        reply[#reply + 1] = handed[#handed]
      end
      if #handed > 0 then
        redis.call('PUBLISH', string.sub(KM, 1, -2) .. 'n', table.concat(handed, ' '))
        fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'f', f, 'W', waiting
        meta_until = meta_expiry(last)
        if meta_until then fields[#fields + 1], fields[#fields + 2] = 'G', meta_until end
      end
    end
    fields[#fields + 1], fields[#fields + 2] = 'h', inline_text(held)
    -- Permits left free with nobody in line: barging waiters may take them.
    if (tonumber(raw[14]) or 0) > now and waiting == 0 then
      local free = tonumber(raw[1]) or 0
      for _, x in ipairs(held) do free = free - x[4] end
      if free > 0 then wake_barging(free) end
    end
    -- A departure now, for the estimated wait (as depart() in the prelude).
    local r, l = tonumber(raw[8]), tonumber(raw[9]) or 0
    if l > 0 then
      if r == nil then r = now - l else r = math.floor(r * 0.8 + (now - l) * 0.2 + 0.5) end
    end
    fields[#fields + 1], fields[#fields + 2] = 'l', now
    if r ~= nil then fields[#fields + 1], fields[#fields + 2] = 'r', r end
    if not raw[12] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
    redis.call('HSET', KM, unpack(fields))
    if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
    return reply
  end
end
