-- add.lua: adds a name to a registry of names (issue 18, listing).
--   KEYS[1] ZSET  the registry of one kind (gates, queues), every member
--                 at score 0 so that ZRANGEBYLEX pages it by name
-- ARGV[1] the name
-- ARGV[2] the store's idle period (ms)
-- Reply: 1.
-- Invariant: the set never exists without an expiry. Each registration
-- keeps it for the idle period from now, like every other key, so a store
-- nobody used for that long holds no keys at all.
redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
