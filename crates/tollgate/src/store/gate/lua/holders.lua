-- holders.lua: the current holders, soonest to end first (after expiring
-- what ended).
-- ARGV: 1 limit
-- Reply: {ttl_ms, label or '', handle, fence, ttl_ms, ...} (fence 0: a
--        lease granted at once, whose fence is not kept)
--        (handle: the first 16 hex digits of the SHA-1 of the token, which
--        names the lease to admin.lua without giving its token away)
-- Invariant: reads only; the prelude's expiry is its only write.
local limit = tonumber(ARGV[1])
local reply = {}
if S.holders > 0 then
  -- Leases that ended but are not swept yet (EXPIRE_STEP) are not listed.
  local all = redis.call('ZRANGEBYSCORE', KH, '(' .. now, '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #all, 2 do
    local label = ''
    if S.a > 0 then label = redis.call('HGET', KP, 'L:' .. all[i]) or '' end
    reply[#reply + 1] = math.max(0, tonumber(all[i + 1]) - now)
    reply[#reply + 1] = label
    reply[#reply + 1] = string.sub(redis.sha1hex(all[i]), 1, 16)
    -- Only a lease handed through the line keeps its fence (f:, negative
    -- until picked up).
    local f = 0
    if S.o > 0 then f = tonumber(redis.call('HGET', KP, 'f:' .. all[i])) or 0 end
    reply[#reply + 1] = math.abs(f)
  end
end
return done(reply)
