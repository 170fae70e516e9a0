-- leave.lua: release a lease early, or leave the line.
-- ARGV: 1 id
-- Reply: {1} released; {2} left the line; {0} unknown (ended already)
-- Invariant: freed permits go to the head of the line in the same step.
local id = ARGV[1]

if holders > 0 and redis.call('ZREM', KH, id) == 1 then
  holders = holders - 1
  if holders == 0 then h_fresh = true end
  depart(1)
  forget_holder(id)
  promote()
  return done({1})
end
if waiting > 0 and drop_ticket(id) then
  promote()
  return done({2})
end
return done({0})
