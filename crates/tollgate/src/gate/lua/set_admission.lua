--- @include "general.lua"
--- @include "line_clear.lua"
--- @needs KM, now, S, F, was, done, promote, clear_line, F.end_draw
-- set_admission.lua: admission control, the door, and the queueing. Paused, nobody new
-- is granted (everyone queues; holders are not touched); with an
-- interval, at most one grant per interval. Resuming or loosening admits
-- the line at once. A closed door (D) refuses every newcomer (enter.lua,
-- and a pass in leave_general.lua); its note (M) is the owner's, kept as
-- given. The door, the pause and a drop of the line change in this one
-- step.
-- ARGV: 1 paused ('1', '0', or '' to leave it), 2 least ms between
--       admissions ('0' for none, '' to leave it), and to set the door:
--       3 closed ('1' or '0'; '' to leave the door), 4 its note ('' for
--       none), 5 '1' to drop the whole line too, 6 nobody admitted before
--       this (ms, server time; '' for no hold), 7 the door closes at this
--       ('' for none); a time already past is no hold, and closes the
--       door at once; 8 how free permits go to the line: the state of
--       random queueing's picks (O, 1 to PICK_MOD - 1, see
--       general_grant.lua), '0' for first come, first served ('' or
--       absent to leave it)
-- Reply: {1, tickets dropped}
if ARGV[1] == '1' then
  S.P = 1
  redis.call('HSET', KM, 'P', 1)
elseif ARGV[1] == '0' then
  S.P = 0
  redis.call('HDEL', KM, 'P')
end
if ARGV[2] and ARGV[2] ~= '' then
  S.R = tonumber(ARGV[2])
  if S.R > 0 then
    redis.call('HSET', KM, 'R', S.R)
  else
    S.A = 0
    redis.call('HDEL', KM, 'R', 'A')
    was.A = 0
  end
end
local dropped = 0
if ARGV[3] and ARGV[3] ~= '' then
  if ARGV[3] == '1' then
    S.D = 1
    redis.call('HSET', KM, 'D', 1)
  else
    S.D = 0
    redis.call('HDEL', KM, 'D')
  end
  if ARGV[4] ~= '' then redis.call('HSET', KM, 'M', ARGV[4]) else redis.call('HDEL', KM, 'M') end
  S.I, S.J = tonumber(ARGV[6]) or 0, tonumber(ARGV[7]) or 0
  if S.I <= now then S.I = 0 end
  if S.J > 0 and S.J <= now then S.J, S.D = 0, 1 end
  if S.D == 1 then redis.call('HSET', KM, 'D', 1) end
  if S.I > 0 then redis.call('HSET', KM, 'I', S.I) else redis.call('HDEL', KM, 'I') end
  -- No opening pending: the draw, if any, is over.
  if S.I == 0 then F.end_draw() end
  if S.J > 0 then redis.call('HSET', KM, 'J', S.J) else redis.call('HDEL', KM, 'J') end
  if ARGV[5] == '1' then dropped = clear_line() end
end
if ARGV[8] and ARGV[8] ~= '' then S.O = tonumber(ARGV[8]) end
S.wrote_meta = true
S.freed = true
promote()
return done({1, dropped})
