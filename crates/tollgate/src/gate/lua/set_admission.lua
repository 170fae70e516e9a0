--- @include "general.lua"
--- @needs KM, S, was, done, promote
-- set_admission.lua: admission control. Paused, nobody new is granted
-- (everyone queues; holders are not touched); with an interval, at most one
-- grant per interval. Resuming or loosening admits the line at once.
-- ARGV: 1 paused ('1', '0', or '' to leave it), 2 least ms between
--       admissions ('0' for none, '' to leave it)
-- Reply: {1}
if ARGV[1] == '1' then
  S.P = 1
  redis.call('HSET', KM, 'P', 1)
elseif ARGV[1] == '0' then
  S.P = 0
  redis.call('HDEL', KM, 'P')
end
if ARGV[2] ~= '' then
  S.R = tonumber(ARGV[2])
  if S.R > 0 then
    redis.call('HSET', KM, 'R', S.R)
  else
    S.A = 0
    redis.call('HDEL', KM, 'R', 'A')
    was.A = 0
  end
end
S.wrote_meta = true
S.freed = true
promote()
return done({1})
