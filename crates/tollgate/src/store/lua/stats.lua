-- stats.lua: a snapshot of the gate (after expiring what ended).
-- ARGV: none
-- Reply: {capacity or -1, used, holders, waiting, grants, expiries, fence}
return done({cap or -1, used(), holders, waiting, Mf - Mb, Mx, Mf})
