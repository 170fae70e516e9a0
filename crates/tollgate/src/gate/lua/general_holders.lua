--- @include "general_state.lua"
--- @include "inline.lua"
--- @needs S, F, INLINE, inline_entry
--- @defines F.inline_holders, F.inline_text, F.used, F.permits_of, F.holder_side, F.note_side_data
--- @defines F.forget_label, F.inline_at, F.remove_holder, F.lookup, F.holder_list, F.set_fence
--- @defines F.set_expiry, F.holders_to_set, F.add_holder
-- general_holders.lua: the general path's holders, in either layout
-- (inline in m's h, or the sorted set h with side data in p), and the
-- side data and labels they and the line's tickets keep in p.
-- The inline holders (see inline.lua), parsed, and written back.
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
