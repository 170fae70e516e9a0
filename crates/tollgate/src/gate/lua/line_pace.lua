--- @snippet r, l, now
-- line_pace.lua: the line's pace, moved by a grant from the line at
-- `now`: r, the average gap between such grants (ms, a moving average;
-- nil until the first gap was measured), and l, when the line last moved
-- (0: never; the caller sets it to now after). A clock that went back
-- counts as no gap. Copied (--- @inline) into general_line.lua's
-- line_moved(), leave_fast.lua and leave_line.lua; the same formula as
-- GateState::line_moved in src/gate/memory.rs.
if l > 0 then
  local gap = math.max(0, now - l)
  if r == nil then r = gap else r = math.floor(r * 0.8 + gap * 0.2 + 0.5) end
end
