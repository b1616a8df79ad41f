-- wrk script for bench/: many shoppers' API tokens in rotation, answers counted by status.
--
-- wrk ... -s bench/wrk/rotate.lua <url> -- METHOD PATH TOKENS_FILE BODY ONCE NTHREADS DONE_DIR
--   METHOD GET or POST; TOKENS_FILE one API token a line ("-" for none);
--   ONCE "1": every token is used exactly once across all threads, then the thread
--   sends cheap GET /api/ping requests until each of its purchases has its answer (or,
--   when a socket error ate an answer, 10 s after its last purchase went out) and stops
--   (the flood); "0": tokens rotate (thread i takes i, i+T, i+2T, ...).
-- wrk's main thread sleeps for the whole -d whatever its threads do, so a thread that is
-- finished also leaves a file named after it in DONE_DIR; the runner then sends SIGINT.
-- done() prints one line "BENCH_JSON {...}" with the counts and latency percentiles.

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  method, path, body = args[1], args[2], args[4]
  once = args[5] == "1"
  nthreads = tonumber(args[6])
  done_dir = args[7]
  tokens = {}
  if args[3] ~= "-" then
    for line in io.lines(args[3]) do
      tokens[#tokens + 1] = line
    end
  end
  counter = tid
  share = 0
  if once then
    -- tokens with index i (0-based) where i % nthreads == tid
    share = math.floor((#tokens - tid + nthreads - 1) / nthreads)
  end
  answered = 0
  statuses = {}
  ping = wrk.format("GET", "/api/ping")
  -- wrk calls the first thread's request() once before any thread runs, to check the
  -- script (script_verify_request); that request is never sent, so it takes no token.
  verifying = tid == 0
end

local function finish()
  if not finished then
    finished = true
    local f = io.open(done_dir .. "/" .. tid, "w")
    f:close()
  end
  wrk.thread:stop()
end

function request()
  if verifying then
    verifying = false
    return ping
  end
  local headers = {}
  if #tokens > 0 then
    local i = counter
    if i >= #tokens then
      if once then
        exhausted_at = exhausted_at or os.time()
        if os.time() - exhausted_at >= 10 then
          finish()
        end
        return ping
      end
      i = i % #tokens
    end
    counter = counter + nthreads
    headers["Authorization"] = "Token " .. tokens[i + 1]
  end
  if method == "POST" then
    headers["Content-Type"] = "application/json"
    return wrk.format("POST", path, headers, body)
  end
  return wrk.format(method, path, headers)
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
  if once and status ~= 200 then
    answered = answered + 1
    if answered >= share then
      finish()
    end
  end
end

function done(summary, latency, requests)
  local agg = {}
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do
      agg[tostring(code)] = (agg[tostring(code)] or 0) + n
    end
  end
  local parts = {}
  for code, n in pairs(agg) do
    parts[#parts + 1] = string.format('"%s": %d', code, n)
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"duration_us": %d, "requests": %d, "statuses": {%s}, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "timeout": %d, "status": %d}, ' ..
    '"latency_us": {"p50": %d, "p75": %d, "p90": %d, "p95": %d, "p99": %d, "p99.9": %d, ' ..
    '"mean": %.1f, "max": %d}}\n',
    summary.duration, summary.requests, table.concat(parts, ", "),
    e.connect, e.read, e.write, e.timeout, e.status,
    latency:percentile(50), latency:percentile(75), latency:percentile(90), latency:percentile(95),
    latency:percentile(99), latency:percentile(99.9), latency.mean, latency.max))
end
