-- lone_renew.lua: renewing a live lone lease (see head.lua) whose m
-- outlives the renewed lease by IDLE: GET, PTTL and PEXPIRETIME of m
-- (server time is its expiry less its TTL), SET of the new end with m's
-- expiry. Anything else falls through (held_fast.lua's read_meta() moves
-- the lease into h, and the inline renewal extends m).
-- ARGV as renew.lua. Reply as renew.lua, or falls through.
local lone_id, lone_ends = string.match(redis.call('GET', KK) or '', LONE)
if lone_id == ARGV[1] then
  local ttl = tonumber(ARGV[2])
  local left = redis.call('PTTL', KM)
  if left >= ttl + IDLE then
    local until_m = redis.call('PEXPIRETIME', KM)
    local at = until_m - left
    if tonumber(lone_ends) > at then
      redis.call('SET', KK, ARGV[1] .. ' ' .. string.format('%d', at + ttl), 'PXAT', string.format('%d', until_m))
      return {1, ttl}
    end
  end
end
