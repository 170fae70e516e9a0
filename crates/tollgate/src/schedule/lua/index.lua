-- index.lua: which queue each schedule lives with, and which queues have
-- schedules. Every key shares one hash tag (one slot on a cluster).
--   KEYS[1] HASH  schedule name -> queue name, for the names of one of
--                 256 buckets (CRC-16 of the name; redis.rs picks it), so
--                 each stays a small listpack
--   KEYS[2] SET   queues that have schedules; firing processes look for
--                 due ticks in each, so it must hold no more than those
--   KEYS[3] HASH  queue -> how many names of the buckets point to it, and
--                 the field '' (no queue has that name) once the counts
--                 are kept: an index written before they were is counted
--                 once, from the buckets, by the first call that needs
--                 them
-- ARGV[1] the operation:
--   set name queue  -> the queue it had, or false
--   get name        -> its queue, or false
--   drop name queue -> 1 if it was with that queue (and is now dropped)
--   prune queue     -> 1 if the queue left KEYS[2]: no name points to it
--                      (firing found it holds no schedule: an entry left
--                      by an index from before the counts)
--   queues          -> every queue listed
-- Invariant: a queue is in KEYS[2] while a name points to it. It leaves in
-- the step that drops (or moves) its last name, so a create on the same
-- queue, whose set comes before its put, either finds it listed or lists
-- it again; firing's work follows the queues that have schedules, not
-- every queue that ever had one.
local op = ARGV[1]
if op == 'get' then
  return redis.call('HGET', KEYS[1], ARGV[2])
end
if op == 'queues' then
  return redis.call('SMEMBERS', KEYS[2])
end

local KQ, KC = KEYS[2], KEYS[3]
if redis.call('HEXISTS', KC, '') == 0 then
  -- The names each queue has, counted once from every bucket (its keys
  -- share the hash tag: base .. 'n:' .. bucket).
  local base, counts = string.sub(KQ, 1, -2), {}
  for bucket = 0, 255 do
    for _, q in ipairs(redis.call('HVALS', base .. 'n:' .. bucket)) do
      counts[q] = (counts[q] or 0) + 1
    end
  end
  -- (In slices: unpack takes a few thousand values at most.)
  local fields = {'', 1}
  for q, n in pairs(counts) do
    fields[#fields + 1], fields[#fields + 2] = q, n
    if #fields >= 1000 then
      redis.call('HSET', KC, unpack(fields))
      fields = {}
    end
  end
  if #fields > 0 then redis.call('HSET', KC, unpack(fields)) end
end

-- One name fewer points to queue q: the last takes q out of KQ.
local function unlisted(q)
  if redis.call('HINCRBY', KC, q, -1) <= 0 then
    redis.call('HDEL', KC, q)
    redis.call('SREM', KQ, q)
  end
end

if op == 'set' then
  local old = redis.call('HGET', KEYS[1], ARGV[2])
  redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
  redis.call('SADD', KQ, ARGV[3])
  if old ~= ARGV[3] then
    redis.call('HINCRBY', KC, ARGV[3], 1)
    if old then unlisted(old) end
  end
  return old
end
if op == 'drop' then
  if redis.call('HGET', KEYS[1], ARGV[2]) == ARGV[3] then
    redis.call('HDEL', KEYS[1], ARGV[2])
    unlisted(ARGV[3])
    return 1
  end
  return 0
end
if op == 'prune' then
  if redis.call('HEXISTS', KC, ARGV[2]) == 1 then return 0 end
  return redis.call('SREM', KQ, ARGV[2])
end
return redis.error_reply('unknown index operation ' .. tostring(op))
