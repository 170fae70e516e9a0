--- @include "general_grant.lua"
--- @needs S, F, MARGIN, CHUNK, was, raw, wake_barging, new_epoch, meta_expiry
--- @defines F.with_handed, F.keep_until, F.finish, F.done
--- @needs F.holder_side, F.inline_text, F.may_admit, F.used
-- general_finish.lua: the general path's end: the reply with this call's
-- hand-offs, and the write-back of what changed in m, with every key's
-- TTL kept past every deadline it holds.
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
  put('B', S.B, was.B) put('O', S.O, was.O)
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
  -- (The door's timers too: the gate is kept until they have run.)
  local last = math.max(S.T, S.U, S.V, S.A, S.r_top, S.h_top, S.I, S.J)
  if k > 0 or S.wrote_meta then last = math.max(last, S.now) end
  local meta_until = exists and meta_expiry(last, raw[10])
  if meta_until then
    changed[k + 1], changed[k + 2] = 'G', meta_until
    k = k + 2
  end
  -- k: the fast paths must leave this gate to the general path (holders on
  -- the sorted set, labels, a multi-permit waiter, admission control, or
  -- a sweep under way, a closed door or its timers, random queueing).
  -- Set before any of these is written; a k left set by a fast path that
  -- could not tell is cleared here.
  local complex = S.H > 0 and not S.inline or S.n > 0 or S.a > 0 or S.P ~= 0 or S.R ~= 0 or S.Y ~= '0' or S.D ~= 0
    or S.I ~= 0 or S.J ~= 0 or S.O ~= 0
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
