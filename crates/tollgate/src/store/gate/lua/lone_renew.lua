-- lone_renew.lua: renewing a live lone lease (see head.lua) whose m
-- outlives the renewed lease by IDLE: GET, PTTL of H and m, PEXPIRE.
-- Anything else falls through (held_fast.lua's read_meta() moves the
-- lease into h, and the inline renewal extends m).
-- ARGV as renew.lua. Reply as renew.lua, or falls through.
if redis.call('GET', KK) == ARGV[1] and redis.call('PTTL', KK) > IDLE then
  local ttl = tonumber(ARGV[2])
  local left = redis.call('PTTL', KM)
  if left == -1 or left >= ttl + IDLE then
    redis.call('PEXPIRE', KK, string.format('%d', ttl + IDLE))
    return {1, ttl}
  end
end
