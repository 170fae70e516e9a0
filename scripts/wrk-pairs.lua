-- wrk script for scripts/bench-http: enter+release pairs with a light load
-- generator. Run with one connection per thread (-t N -c N), so a thread's
-- requests and responses alternate: each thread enters its own gate (POST,
-- without queueing), then releases the lease it got (DELETE), and so on.
-- done() prints one JSON line: released pairs per second, and wrk's
-- latency percentiles over all requests.
local threads = {}

function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  token, released = nil, 0
  gate = "/v1/gates/wrk-" .. tid .. "-" .. math.random(1000000000)
  enter_body = '{"capacity":1,"queue":false}'
end

function request()
  if token then
    return wrk.format("DELETE", gate .. "/leases/" .. token)
  end
  return wrk.format("POST", gate .. "/enter", {["Content-Type"] = "application/json"}, enter_body)
end

function response(status, headers, body)
  if token then
    token = nil
    if status == 200 then released = released + 1 end
  elseif status == 200 then
    token = body:match('"token":"([A-Za-z0-9]+)"')
  end
end

function done(summary, latency, requests)
  local total = 0
  for _, t in ipairs(threads) do total = total + t:get("released") end
  local secs = summary.duration / 1e6
  io.write(string.format(
    '{"peer":"wrk","case":"http_enter_release_wrk","pairs_per_s":%.0f,"requests_per_s":%.0f,' ..
    '"p50_ms":%.3f,"p99_ms":%.3f,"errors":%d}\n',
    total / secs, summary.requests / secs, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
