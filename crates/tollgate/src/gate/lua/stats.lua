--- @include "general.lua"
--- @needs KM, S, done, used
-- stats.lua: a snapshot of the gate (after expiring what ended).
-- ARGV: none
-- Reply: {{capacity or -1, used, holders, waiting, grants, expiries, fence,
--         paused (1/0), least ms between admissions (0: none), the last
--         reset of the line (ms, server time; 0: none), door closed (1/0),
--         no admission before (ms; 0: none), the door closes at (ms; 0:
--         none), random queueing (1/0)}, the door's note}
local more = redis.call('HMGET', KM, 'C', 'M')
return done({{S.cap or -1, used(), S.holders, S.waiting, S.f - S.b, S.x, S.f, S.P, S.R, tonumber(more[1]) or 0, S.D,
  S.I, S.J, S.O > 0 and 1 or 0},
  more[2] or ''})
