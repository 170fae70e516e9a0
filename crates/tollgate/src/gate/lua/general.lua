--- @include "general_state.lua"
--- @include "general_holders.lua"
--- @include "general_line.lua"
--- @include "general_expire.lua"
--- @include "general_grant.lua"
--- @include "general_finish.lua"
--- @needs F
--- @defines done, promote, next_fence, add_holder, set_expiry, set_deadline, eta, used, may_admit
--- @defines admitted, lookup, remove_holder, set_fence, drop_ticket, permits_of, note_side_data
--- @needs F.add_holder, F.admitted, F.done, F.drop_ticket, F.eta, F.expire, F.lookup, F.may_admit
--- @needs F.next_fence, F.note_side_data, F.permits_of, F.promote, F.remove_holder, F.set_deadline
--- @needs F.set_expiry, F.set_fence, F.used
-- general.lua: the general path of every gate script but watch.lua and
-- pass_many.lua. It expires what ended, hands free permits to the head of
-- the line, and at the end (F.done, which the operation's body returns
-- through) writes back what changed in the meta hash and keeps key TTLs
-- past every deadline in them (the invariants: see keys.lua).
-- general_state.lua reads the state; general_holders.lua and
-- general_line.lua hold the helpers; general_expire.lua and
-- general_grant.lua are the two steps every call makes, here, before the
-- operation's body; general_finish.lua writes back.
--
-- The call's state lives in the table S and the helpers in F, so each
-- helper captures two upvalues, not the dozens of locals it uses: Lua
-- builds every closure afresh on each call, and capturing many locals
-- made that set-up the largest part of a general path's cost.

F.expire()
F.promote()

-- The helpers the operation's body calls (plain locals of the main chunk:
-- no closure captures them).
local done, promote, next_fence, add_holder, set_expiry, set_deadline, eta, used, may_admit, admitted,
  lookup, remove_holder, set_fence, drop_ticket, permits_of, note_side_data =
  F.done, F.promote, F.next_fence, F.add_holder, F.set_expiry, F.set_deadline, F.eta, F.used, F.may_admit,
  F.admitted, F.lookup, F.remove_holder, F.set_fence, F.drop_ticket, F.permits_of, F.note_side_data
