-- lone_leave.lua: a plain release by a one-permit handle (ARGV[3] '1')
-- of a live lone lease (see head.lua), with no barging waiter to wake and
-- a departure average to update: GET, PTTL and PEXPIRETIME of H (server
-- time is its expiry less its TTL), HMGET of 3 fields, DEL and HSET of
-- the departure (as depart() in the prelude). Anything else falls
-- through, where the lease is an inline holder (leave_fast.lua moves it
-- into h).
-- ARGV as leave.lua. Reply as leave.lua, or falls through.
local lone_entry
if (ARGV[2] or '') == '' and (ARGV[4] or '') == '' and ARGV[3] == '1' then
  lone_entry = redis.call('GET', KK)
  local id, ends = string.match(lone_entry or '', LONE)
  if id == ARGV[1] then
    local left = redis.call('PTTL', KK)
    local at = redis.call('PEXPIRETIME', KK) - left
    local d = redis.call('HMGET', KM, 'r', 'l', 'N')
    if tonumber(ends) > at and d[1] and d[2] and (tonumber(d[3]) or 0) <= at then
      redis.call('DEL', KK)
      local r = math.floor(tonumber(d[1]) * 0.8 + (at - tonumber(d[2])) * 0.2 + 0.5)
      redis.call('HSET', KM, 'l', string.format('%d', at), 'r', string.format('%d', r))
      return {1}
    end
  end
end
