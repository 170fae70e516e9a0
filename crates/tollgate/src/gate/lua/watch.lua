#!lua flags=no-writes
-- watch.lua: what a server keeping a local view of a gate needs, read in
-- one step without changing anything (the no-writes flag makes Redis
-- refuse any write, so a read can never create a gate's state).
-- KEYS: as the gate scripts (m only, see keys.lua); reads m and r.
-- ARGV: 1 since (a cursor from an earlier reply; 0: everything kept),
--       2 the most ids to answer
-- Reply: {epoch ('' if the gate has no state), capacity or -1, paused
--         (1/0), least ms between admissions (0: none), door closed
--         (1/0), the door's note, no admission before (ms; 0: none), the
--         door closes at (ms; 0: none), random queueing (1/0), cursor,
--         id, ...}: the door as it
--         reads now (a timer due counts as run, though nothing is written)
--        the ids ended (leave.lua with a keep) with a score at or above
--        `since`, oldest first, skipping those older than their keep (K).
--        The cursor is one past the last score answered when the answer
--        was cut at the maximum, else one past the last score ever handed
--        out (m's Z; `since` if none): every later end scores above Z,
--        whatever TIME says then, so no cursor skips one.
-- Invariant: writes nothing; no expiry runs (capacity and admission
-- settings are as stored).
local KM = KEYS[1]
local KR = string.sub(KM, 1, -2) .. 'r'
local since, max = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local m = redis.call('HMGET', KM, 'E', 'c', 'P', 'R', 'K', 'Z', 'D', 'M', 'I', 'J', 'O')
local K = tonumber(m[5]) or 0

local from = math.max(since, (now - K) * 1024)
local got = redis.call('ZRANGEBYSCORE', KR, string.format('%d', from), '+inf', 'WITHSCORES', 'LIMIT', 0, max)
local cursor
if #got / 2 == max then
  cursor = tonumber(got[#got]) + 1
else
  local Z = tonumber(m[6])
  if Z then cursor = math.max(Z + 1, since) else cursor = since end
end

local closed, opens, closes = tonumber(m[7]) or 0, tonumber(m[9]) or 0, tonumber(m[10]) or 0
if opens <= now then opens = 0 end
if closes > 0 and closes <= now then closed, closes = 1, 0 end
local reply = {m[1] or '', tonumber(m[2]) or -1, tonumber(m[3]) or 0, tonumber(m[4]) or 0, closed, m[8] or '',
  opens, closes, (tonumber(m[11]) or 0) > 0 and 1 or 0, cursor}
for i = 1, #got, 2 do reply[#reply + 1] = got[i] end
return reply
