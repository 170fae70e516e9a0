--- @include "general.lua"
--- @needs KM, KR, MARGIN, now, S, F, done, promote, lookup, remove_holder, used, may_admit, admitted, next_fence, add_holder, drop_ticket
--- @needs F.with_handed
-- leave_general.lua: the general path of leave.lua (and of admin.lua's
-- revoke and removal): release a lease early, or leave the line; with a keep (an
-- end), a released holder's token also goes into the revocation log r.
-- ARGV: 1 id, 2 keep ms (absent or '': a plain leave; an end records
--       only a holder, a ticket leaving the line is a plain cancel),
--       3 '1' if the caller's gate has one permit (a hint for
--       leave_fast.lua), 4 a pass: the id of an acquire waiting in the
--       caller's process, 5 its permits, 6 its ttl ms (a plain leave only)
-- Reply: {1} released; {2} left the line; {0} unknown (ended already);
--        {3, fence, ttl_ms} released and passed: the pass's id was
--        granted the lease with that fence, as a plain enter would grant
--        it once the release and its hand-offs are done (no line left,
--        room for its permits, admission control letting one in);
--        each followed by the hand-offs the freed permits made,
--        "<ticket id>:<fence>" (as published)
-- Invariant: freed permits go to the head of the line in the same step; an
-- end is in r, with a score above every earlier one, when this returns.
local id, keep = ARGV[1], tonumber(ARGV[2])
local pass = not keep and ARGV[4] ~= '' and ARGV[4] or nil

-- At most this many stale entries pruned per end: a gate whose log aged
-- all at once sheds it over several ends (each adds one), and until then
-- readers skip what is older than K anyway.
local PRUNE_STEP = 1000

-- Records the end of `id`'s lease, kept at least `keep` ms.
local function record_end()
  local K = tonumber(redis.call('HGET', KM, 'K')) or 0
  local stale = redis.call('ZCOUNT', KR, '-inf', '(' .. string.format('%d', (now - K) * 1024))
  if stale > 0 then redis.call('ZREMRANGEBYRANK', KR, 0, math.min(stale, PRUNE_STEP) - 1) end
  local top = redis.call('ZRANGE', KR, -1, -1, 'WITHSCORES')
  -- An empty log starts K afresh, so one long keep does not outlive its
  -- entries; otherwise K covers every entry still kept.
  if top[2] == nil then K = keep else K = math.max(K, keep) end
  -- Z, the last score handed out, stays in m while the log empties and
  -- refills: scores never go back within an epoch whatever TIME does, so
  -- a reader's cursor (never past Z + 1) skips no later end.
  local score = math.max(now * 1024, (tonumber(redis.call('HGET', KM, 'Z')) or 0) + 1)
  redis.call('ZADD', KR, score, id)
  S.r_top = now + K + MARGIN
  redis.call('PEXPIREAT', KR, S.r_top)
  redis.call('HSET', KM, 'K', K, 'Z', string.format('%d', score))
end

local held = lookup(id)
if held == 'ended' then
  -- It ended before this call: an expiry, not a release (nothing to end).
  promote()
  return done(F.with_handed(0))
end
if held then
  remove_holder(id)
  if keep then record_end() end
  promote()
  local pp = pass and tonumber(ARGV[5])
  if pass and S.cap and S.D == 0 and S.waiting == 0 and used() + pp <= S.cap and may_admit() then
    admitted()
    local f, ttl = next_fence(), tonumber(ARGV[6])
    add_holder(pass, now + ttl, 0, pp)
    local reply = F.with_handed(3)
    table.insert(reply, 2, f)
    table.insert(reply, 3, ttl)
    return done(reply)
  end
  return done(F.with_handed(1))
end
if S.waiting > 0 and drop_ticket(id) then
  promote()
  return done(F.with_handed(2))
end
return done(F.with_handed(0))
