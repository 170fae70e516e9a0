--- @include "meta.lua"
--- @include "inline.lua"
--- @needs KM, now, clock, raw, read_meta, new_epoch, meta_expiry, inline_entry, inline_find
-- held_fast.lua: a holder of an inline lease (capacity up to INLINE) asks
-- about it, when no lease has ended and the gate needs nothing of the
-- general path (no k, see enter_fast.lua; no stale ticket due to be
-- swept; no free permits a waiter could take). Used by poll.lua (ARGV id,
-- ttl, heartbeat: a waiter picking up the lease handed to it, the end of
-- every hand-off) and renew.lua (ARGV id, ttl): TIME, read_meta()'s read,
-- and for a pick-up or a renewal one write of m.
-- Reply as the body's, or falls through (a ticket still in line, an
-- unknown id, an ended lease: the general path answers those).
-- Invariant: identical outcome to poll.lua / renew.lua for the same state.
-- (After lone_renew.lua for a renewal; read_meta() moves a lone lease
-- into h.)
clock()
read_meta()
local held_h = raw[3] or ''
if not raw[4] and held_h ~= '' then
  local used, X = tonumber(raw[12]) or 0, tonumber(raw[13]) or 0
  local waiting, z = tonumber(raw[5]) or 0, tonumber(raw[6]) or 0
  if X > now and (waiting == 0 or z > now and used >= (tonumber(raw[1]) or 0)) then
    local i, j = inline_find(held_h, ARGV[1])
    if i then
      local expires, fence, permits = string.match(string.sub(held_h, i, j), ' (%d+) (%-?%d+) (%d+)$')
      local f, polling = tonumber(fence), ARGV[3] ~= nil
      if polling and f >= 0 then return {1, f, tonumber(expires) - now} end
      -- Pick up (fence made positive) or renew: the lease runs ttl from now.
      local ttl = tonumber(ARGV[2])
      local ends = now + ttl
      if f < 0 then f = -f end
      local h = string.sub(held_h, 1, i - 1) .. inline_entry(ARGV[1], ends, f, permits) .. string.sub(held_h, j + 1)
      local fields = {'h', h}
      if ends < X then fields[3], fields[4] = 'X', ends end
      if not raw[9] then fields[#fields + 1], fields[#fields + 2] = 'E', new_epoch() end
      -- (m's TTL never shrinks: whoever set the line's TTLs made it outlive them.)
      local meta_until = meta_expiry(ends, raw[10])
      if meta_until then fields[#fields + 1], fields[#fields + 2] = 'G', meta_until end
      redis.call('HSET', KM, unpack(fields))
      if meta_until then redis.call('PEXPIREAT', KM, meta_until) end
      if polling then return {1, f, ttl} end
      return {1, ttl}
    end
  end
end
