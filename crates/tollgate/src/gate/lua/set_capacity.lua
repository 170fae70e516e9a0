--- @include "general.lua"
--- @needs KM, INLINE, S, F, done, promote
--- @needs F.holders_to_set
-- set_capacity.lua: change the gate's capacity at runtime.
-- ARGV: 1 capacity
-- Reply: {1}
-- Invariant: lowering never evicts a holder; raising admits the line at once.
-- Raised past INLINE, inline holders move to the sorted set (at most INLINE
-- of them); lowered to INLINE or less, holders on the set stay there until
-- none is left (add_holder then picks the inline layout).
S.cap = tonumber(ARGV[1])
if S.inline and S.holders > 0 and S.cap > INLINE then F.holders_to_set() end
redis.call('HSET', KM, 'c', S.cap)
S.wrote_meta = true
S.freed = true
promote()
return done({1})
