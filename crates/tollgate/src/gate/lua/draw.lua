--- @include "general.lua"
--- @needs S, done
-- draw.lua: the tickets of the last draw that ended, head first (after
-- the general path, whose door timers end a draw whose opening is due).
-- Reply: {'#<when it ended, ms>', ticket id, ...}, or {} for none
-- Invariant: reads only; the general path's expiry and opening are its
-- only writes. Its caller (a waiting room) publishes no ticket id: it
-- derives its own ids from them.
return done(redis.call('ZRANGE', S.KD, 0, -1))
