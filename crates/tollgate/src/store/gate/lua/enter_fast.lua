-- enter_fast.lua: an idle gate (no holder, nobody in line, no side data,
-- no admission control) with a known capacity grants one unlabelled
-- permit without the general path: five
-- Redis calls in all, and none of the prelude's set-up.
-- ARGV as enter.lua. Reply: {1, fence, ttl_ms}, or falls through.
-- Invariant: identical outcome to enter.lua for the same state.
if (tonumber(raw[9]) or 0) == 0 and (tonumber(raw[10]) or 0) == 0
  and (tonumber(raw[6]) or 0) == 0 and (tonumber(raw[8]) or 0) == 0 and not raw[19] and not raw[20] then
  local permits, asked, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
  local stored = tonumber(raw[1])
  if permits == 1 and ARGV[7] == '' and (stored == nil and asked > 0 or stored ~= nil and (asked == 0 or asked == stored)) then
    local f, b = tonumber(raw[2]) or 0, tonumber(raw[3]) or 0
    if f == 0 then
      f = now * 1000
      b = f
    end
    f = f + 1
    redis.call('ZADD', KH, now + ttl, ARGV[1])
    local expiry = now + ttl + MARGIN + CHUNK
    local fields = {'c', stored or asked, 'f', f, 'b', b, 'H', 1, 'T', expiry, 'X', now + ttl}
    -- The gate's state is created here (or predates epochs): give it one.
    if not raw[24] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
    local meta_until = meta_expiry(expiry)
    if meta_until then fields[#fields + 1], fields[#fields + 2] = 'G', meta_until end
    redis.call('HSET', KM, unpack(fields))
    if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
    redis.call('PEXPIREAT', KH, expiry)
    return {1, f, ttl}
  end
end
