-- set_capacity.lua: change the gate's capacity at runtime.
-- ARGV: 1 capacity
-- Reply: {1}
-- Invariant: lowering never evicts a holder; raising admits the line at once.
S.cap = tonumber(ARGV[1])
redis.call('HSET', KM, 'c', S.cap)
S.wrote_meta = true
promote()
return done({1})
