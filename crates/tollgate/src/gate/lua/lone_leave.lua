--- @include "keys.lua"
--- @needs KK, LONE
--- @defines lone_entry
-- lone_leave.lua: a plain release by a one-permit handle (ARGV[3] '1',
-- or 'L': the same hint from a handle that saw a line, after leave_line.lua)
-- of a live lone lease (see lone_absorb.lua): GET, PTTL and DEL of H. Nothing
-- else to do: no line (the line's pace counts grants from it only) and no
-- barging waiter to wake (none waited at the grant, and one that came
-- since moved the lease into h). Anything else falls through, where the
-- lease is an inline holder (leave_fast.lua moves it into h).
-- ARGV as leave.lua. Reply as leave.lua, or falls through.
local lone_entry
if (ARGV[2] or '') == '' and (ARGV[4] or '') == '' and (ARGV[3] == '1' or ARGV[3] == 'L') then
  lone_entry = redis.call('GET', KK)
  local id, gap = string.match(lone_entry or '', LONE)
  -- Live: H outlives the lease by gap.
  if id == ARGV[1] and redis.call('PTTL', KK) > tonumber(gap) then
    redis.call('DEL', KK)
    return {1}
  end
end
