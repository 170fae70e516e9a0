-- fenced_set.lua: a guarded write. Sets a key only if the fencing token
-- given is at least the highest one seen for it, so a lock holder whose
-- lease ended unknown to it (frozen, cut off) cannot overwrite what a
-- newer holder wrote. Ships with tollgate (docs/FENCING.md); load it with
-- SCRIPT LOAD or run it with `redis-cli --eval`.
--
-- KEYS[1]  the key to set
-- KEYS[2]  where the highest fence seen for it is kept (on Redis Cluster,
--          in the same slot: `{stock:42}` and `{stock:42}:fence`)
-- ARGV[1]  the writer's fencing token, a whole number from 1 up
-- ARGV[2]  the value
-- ARGV[3]  optional: the value's TTL in ms (the fence key keeps no TTL:
--          a mark that vanished would admit a stale writer again)
--
-- Reply: {1, fence} written, the mark raised to the fence; {0, highest}
-- refused, nothing changed. An argument error is an error reply.
--
-- Invariant: a write is made only with a fence >= every fence that wrote
-- before it; the mark only goes up. Fences are compared as decimal
-- strings (length, then digits), exact for any 64-bit fence, where Lua's
-- numbers are exact only to 2^53.
-- Every argument is checked before anything is written (Redis does not
-- undo a script's writes when a later command fails).
if #KEYS ~= 2 or KEYS[1] == KEYS[2] then
  return redis.error_reply('ERR fenced_set: two different keys, the value\'s and its fence\'s')
end
local fence = ARGV[1]
if type(fence) ~= 'string' or not string.match(fence, '^[1-9]%d*$') or #fence > 20
    or (#fence == 20 and fence > '18446744073709551615') then
  return redis.error_reply('ERR fenced_set: the fence must be a whole number from 1 up, at most 2^64 - 1')
end
if ARGV[2] == nil then
  return redis.error_reply('ERR fenced_set: no value')
end
local ttl = ARGV[3]
if ttl and ttl ~= '' and (not string.match(ttl, '^[1-9]%d*$') or #ttl > 15) then
  return redis.error_reply('ERR fenced_set: the TTL must be a whole number of ms from 1 to 15 digits')
end
local seen = redis.call('GET', KEYS[2])
if seen and (#seen > #fence or (#seen == #fence and seen > fence)) then
  return {0, seen}
end
redis.call('SET', KEYS[2], fence)
if ttl and ttl ~= '' then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ttl)
else
  redis.call('SET', KEYS[1], ARGV[2])
end
return {1, fence}
