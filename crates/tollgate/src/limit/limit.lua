-- One rate-limit decision, the same steps as src/limit/memory.rs
-- (its `gcra` and `windows`, the reference model).
-- KEYS[1]: the key's state: a string (GCRA: arrival time, ns since the
--          epoch) or a hash (windows: w, c, p).
-- ARGV: algorithm ('g', 'f' or 's'), cost, then
--   'g': emission interval (ns), burst
--   'f'/'s': count per window, period (us)
-- Returns {allowed, remaining, retry_ns, reset_ns}.
local t = redis.call('TIME')
local now_s, now_us = tonumber(t[1]), tonumber(t[2])
local algo, cost = ARGV[1], tonumber(ARGV[2])

if algo == 'g' then
  local T, burst = tonumber(ARGV[3]), tonumber(ARGV[4])
  local tau = T * burst
  -- The stored time has 19 digits, too many for a double; split it into
  -- seconds and nanoseconds so the difference from now stays exact.
  -- A key is never further ahead than the bucket's depth, so a changed
  -- limit applies at once.
  local function store(ahead)
    local total = now_us * 1000 + ahead
    local carry = math.floor(total / 1e9)
    redis.call('SET', KEYS[1], string.format('%d%09d', now_s + carry, total - carry * 1e9),
      'PX', math.ceil(ahead / 1e6))
  end
  local ahead, clamped = 0, false
  local v = redis.call('GET', KEYS[1])
  if v then
    local d = (tonumber(string.sub(v, 1, -10)) - now_s) * 1e9 + (tonumber(string.sub(v, -9)) - now_us * 1000)
    if d > tau then
      ahead, clamped = tau, true
    elseif d > 0 then
      ahead = d
    end
  end
  local nxt = ahead + cost * T
  if nxt > tau then
    if clamped then store(tau) end
    return {0, math.floor((tau - ahead) / T), nxt - tau, ahead}
  end
  store(nxt)
  return {1, math.floor((tau - nxt) / T), 0, nxt}
end

local n, p = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_s * 1e6 + now_us
local w = math.floor(now / p)
local elapsed = now - w * p
local left = p - elapsed
local h = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
local cw, count, prev = tonumber(h[1]), 0, 0
if cw == w then
  count, prev = tonumber(h[2]), tonumber(h[3])
elseif cw == w - 1 then
  prev = tonumber(h[2])
end

if algo == 'f' then
  if count + cost > n then
    return {0, math.max(n - count, 0), left * 1000, left * 1000}
  end
  count = count + cost
  redis.call('HSET', KEYS[1], 'w', w, 'c', count, 'p', prev)
  redis.call('PEXPIRE', KEYS[1], math.ceil(left / 1000))
  return {1, n - count, 0, left * 1000}
end

local weight = left / p
local estimate = prev * weight + count
if estimate + cost > n then
  local retry
  if count + cost > n then
    retry = left + math.ceil(p * (1 - (n - cost) / count))
  else
    retry = math.ceil(p * (1 - (n - cost - count) / prev)) - elapsed
  end
  retry = math.max(retry, 0) + 1
  local reset = left
  if count > 0 then reset = left + p end
  return {0, math.max(math.floor(n - estimate), 0), retry * 1000, reset * 1000}
end
count = count + cost
redis.call('HSET', KEYS[1], 'w', w, 'c', count, 'p', prev)
redis.call('PEXPIRE', KEYS[1], math.ceil((left + p) / 1000))
return {1, math.max(math.floor(n - (prev * weight + count)), 0), 0, (left + p) * 1000}
