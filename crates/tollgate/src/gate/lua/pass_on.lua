--- @include "meta.lua"
--- @include "inline.lua"
--- @needs KM, INLINE, now, clock, meta_expiry, inline_find
--- @defines pass_on
-- pass_on.lua: after meta.lua, before leave_fast.lua (a pass alone) and
-- pass_many.lua (the passes of a gate that were ready together): passes
-- of as many permits as each releaser holds (nothing freed, so no barging
-- waiter to wake) on an inline gate with nothing for the general path and
-- no line, made in order, each seeing the state the one before it left:
-- 10 fields read and 4 written (with 2 more of each when m's expiry must
-- move) for all of them. Stops at the first it cannot make; any other
-- pass (more or fewer permits, a line, an ended lease) is leave.lua's.
-- (u: the permits held stay as they are, so they must fit now: a capacity
-- lowered below them lets nobody in, a pass included.)
-- list: flat, per pass the releasing holder's id, the pass's id, the
-- permits and the ttl (ms). Returns the fence and ttl of each pass made,
-- in order.
local function pass_on(list)
  clock()
  local made = {}
  local m = redis.call('HMGET', KM, 'c', 'h', 'k', 'W', 'f', 'X', 'G', 'E', 'u', 'b')
  local cap, X = tonumber(m[1]), tonumber(m[6]) or 0
  if not (cap and cap <= INLINE and not m[3] and (tonumber(m[4]) or 0) == 0 and m[5] and m[8]
    and (tonumber(m[9]) or 0) <= cap) then
    return made
  end
  local h, f, b, G, meta_until = m[2] or '', tonumber(m[5]), tonumber(m[10]) or 0, m[7], nil
  for a = 1, #list - 3, 4 do
    if X <= now then break end
    local i, j = inline_find(h, list[a])
    if not i then break end
    local pp, ttl = tonumber(list[a + 2]), tonumber(list[a + 3])
    if tonumber(string.match(string.sub(h, i, j), '(%d+)$')) ~= pp then break end
    local ends = now + ttl
    -- (As next_fence() in general_grant.lua.)
    if f < now * 1000 then f, b = now * 1000, b + now * 1000 - f end
    f = f + 1
    if i == 1 then h = string.sub(h, j + 2) else h = string.sub(h, 1, i - 2) .. string.sub(h, j + 1) end
    local entry = string.format('%s %d 0 %d', list[a + 1], ends, pp)
    if h == '' then h, X = entry, ends else h = h .. ',' .. entry end
    if ends < X then X = ends end
    -- G as the pass before wrote it.
    local need = meta_expiry(ends, G)
    if need then G, meta_until = need, need end
    made[#made + 1] = f
    made[#made + 1] = ttl
  end
  if not made[1] then return made end
  local fs, bs, Xs = string.format('%d', f), string.format('%d', b), string.format('%d', X)
  if meta_until then
    redis.call('HSET', KM, 'h', h, 'f', fs, 'b', bs, 'X', Xs, 'G', meta_until)
    redis.call('PEXPIREAT', KM, meta_until)
  else
    redis.call('HSET', KM, 'h', h, 'f', fs, 'b', bs, 'X', Xs)
  end
  return made
end
