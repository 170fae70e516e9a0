-- index.lua: which queue each schedule lives with, and which queues have
-- schedules. Every key shares one hash tag (one slot on a cluster).
--   KEYS[1] HASH  schedule name -> queue name, for the names of one of
--                 256 buckets (CRC-16 of the name; redis.rs picks it), so
--                 each stays a small listpack
--   KEYS[2] SET   queues that have (or had) schedules; firing processes
--                 look for due ticks in each. A queue stays listed after
--                 its last schedule goes: removing it cannot be made
--                 atomic with a concurrent create on the queue's slot.
-- ARGV[1] the operation:
--   set name queue  -> the queue it had, or false
--   get name        -> its queue, or false
--   drop name queue -> 1 if it was with that queue (and is now dropped)
--   queues          -> every queue listed
local op = ARGV[1]
if op == 'set' then
  local old = redis.call('HGET', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  redis.call('SADD', KEYS[2], ARGV[3])
  return old
end
if op == 'get' then
  return redis.call('HGET', KEYS[1], ARGV[2])
end
if op == 'drop' then
  if redis.call('HGET', KEYS[1], ARGV[2]) == ARGV[3] then
    return redis.call('HDEL', KEYS[1], ARGV[2])
  end
  return 0
end
if op == 'queues' then
  return redis.call('SMEMBERS', KEYS[2])
end
return redis.error_reply('unknown index operation ' .. tostring(op))
