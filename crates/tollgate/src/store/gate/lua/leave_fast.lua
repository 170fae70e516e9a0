-- leave_fast.lua: releasing a live lease without the general path, when
-- no lease has ended and there are no labels: on the inline layout also
-- when a line waits (the freed permits go to its head at once, as
-- promote() does, if nothing else needs the general path: no admission
-- control, no multi-permit waiter, no stale ticket to sweep); on the
-- sorted-set layout only when nobody waits and there is no side data.
-- ARGV as leave.lua. Reply: {1} released, or falls through (also for an
-- end, which the general path records).
-- Invariant: identical outcome to leave.lua for the same state.
local fast_H, fast_W = tonumber(raw[4]) or 0, tonumber(raw[5]) or 0
if not ARGV[2] and (tonumber(raw[9]) or 0) == 0 then
  -- A departure now, for the estimated wait (as depart() in the prelude).
  local function departed(fields)
    local r, l = tonumber(raw[12]), tonumber(raw[13]) or 0
    if l > 0 then
      if r == nil then r = now - l else r = math.floor(r * 0.8 + (now - l) * 0.2 + 0.5) end
    end
    fields[#fields + 1], fields[#fields + 2] = 'l', now
    if r ~= nil then fields[#fields + 1], fields[#fields + 2] = 'r', r end
    if not raw[16] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
  end
  if fast_H == 0 and raw[3] and raw[3] ~= '' then
    local held = inline_holders(raw[3])
    local mine, live = nil, true
    for i, x in ipairs(held) do
      if x[2] <= now then live = false end
      if x[1] == ARGV[1] then mine = i end
    end
    local z = tonumber(raw[7]) or 0
    if mine and live and (fast_W == 0 or (tonumber(raw[8]) or 0) == 0 and not raw[10] and not raw[11]
      and z > now and (not raw[18] or raw[18] == '0')) then
      table.remove(held, mine)
      local fields, meta_until = {}, nil
      if fast_W > 0 then
        local cap, used, f = tonumber(raw[1]), 0, tonumber(raw[2]) or 0
        for _, x in ipairs(held) do used = used + x[4] end
        local handed, last = {}, 0
        while fast_W > 0 and used < cap do
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
          used, fast_W = used + 1, fast_W - 1
          if deadline > last then last = deadline end
          handed[#handed + 1] = head .. ':' .. string.format('%d', f)
        end
        if #handed > 0 then
          redis.call('PUBLISH', string.sub(KM, 1, -2) .. 'n', table.concat(handed, ' '))
          fields[#fields + 1], fields[#fields + 2], fields[#fields + 3], fields[#fields + 4] = 'f', f, 'W', fast_W
          meta_until = meta_expiry(last)
          if meta_until then fields[#fields + 1], fields[#fields + 2] = 'G', meta_until end
        end
      end
      fields[#fields + 1], fields[#fields + 2] = 'h', inline_text(held)
      departed(fields)
      redis.call('HSET', KM, unpack(fields))
      if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
      return {1}
    end
  elseif fast_H >= 1 and fast_W == 0 then
    local m = read_more()
    -- No lease has ended (X > now) and H is exact: removing ours is all.
    if (tonumber(m[3]) or 0) == 0 and (tonumber(m[4]) or 0) == 0 and (tonumber(m[6]) or 0) > now
      and redis.call('ZREM', KH, ARGV[1]) == 1 then
      local fields = {'H', fast_H - 1}
      if fast_H == 1 then fields[3], fields[4] = 'X', 0 end
      departed(fields)
      redis.call('HSET', KM, unpack(fields))
      return {1}
    end
  end
end
