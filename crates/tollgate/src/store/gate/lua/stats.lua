-- stats.lua: a snapshot of the gate (after expiring what ended).
-- ARGV: none
-- Reply: {capacity or -1, used, holders, waiting, grants, expiries, fence,
--         paused (1/0), least ms between admissions (0: none)}
return done({cap or -1, used(), holders, waiting, Mf - Mb, Mx, Mf, MP, MR})
