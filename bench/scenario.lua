-- wrk script for the benchmark scenarios (bench/run.py; the Python twin is bench/loadgen.py).
--
-- wrk -s bench/scenario.lua URL -- MODE ITEMS_FILE NONCE
--   MODE create32  POST /v1/receipts with a random key of ITEMS_FILE per request
--        hot       POST /v1/receipts, always the first key (one project: the chain's worst case)
--        read      GET /v1/receipts/<id>, a random id of ITEMS_FILE per request
--        verify    POST /v1/verify, a random "KEY RECEIPT_ID INPUT_HASH" line per request
-- Every create carries an input and output hash no other request repeats: 64 hex =
-- NONCE (16, fresh per run) + thread id (8) + per-thread counter (16) + pad (24), so each
-- create is a NEW receipt, never an idempotent replay.
-- done() prints one line "BENCHJSON {...}" with counts, exact-microsecond percentiles and
-- the status codes seen by every thread.

local threads = {}
local next_tid = 0

function setup(thread)
  next_tid = next_tid + 1
  thread:set("tid", next_tid)
  table.insert(threads, thread)
end

local mode, nonce, items, counter
local input_pad = string.rep("a", 24)
local output_pad = string.rep("b", 24)
local create_headers

function init(args)
  mode = args[1]
  nonce = args[3]
  items = {}
  for line in io.lines(args[2]) do
    if #line > 0 then
      items[#items + 1] = line
    end
  end
  math.randomseed(tid * 7919 + os.time())
  counter = 0
  statuses = {}
  if mode == "verify" then
    local parsed = {}
    for i, line in ipairs(items) do
      local key, rid, input_hash = line:match("^(%S+)%s+(%S+)%s+(%S+)$")
      parsed[i] = wrk.format("POST", "/v1/verify",
        { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" },
        '{"receipt_id":"' .. rid .. '","input_hash":"' .. input_hash .. '"}')
    end
    items = parsed
  elseif mode == "read" then
    local parsed = {}
    for i, rid in ipairs(items) do
      parsed[i] = wrk.format("GET", "/v1/receipts/" .. rid)
    end
    items = parsed
  end
end

local function create(key)
  counter = counter + 1
  local middle = nonce .. string.format("%08x%016x", tid, counter)
  local body = '{"input_hash":"sha256:' .. middle .. input_pad .. '","output_hash":"sha256:' .. middle .. output_pad
    .. '","receipt_kind":"release","tags":{"workflow_stage":"build"}}'
  return wrk.format("POST", "/v1/receipts",
    { ["Authorization"] = "Bearer " .. key, ["Content-Type"] = "application/json" }, body)
end

function request()
  if mode == "create32" then
    return create(items[math.random(#items)])
  elseif mode == "hot" then
    return create(items[1])
  end
  return items[math.random(#items)]
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local merged = {}
  for _, thread in ipairs(threads) do
    local seen = thread:get("statuses")
    if seen then
      for code, n in pairs(seen) do
        merged[code] = (merged[code] or 0) + n
      end
    end
  end
  local parts = {}
  for code, n in pairs(merged) do
    parts[#parts + 1] = string.format('"%d":%d', code, n)
  end
  local e = summary.errors
  io.write(string.format(
    'BENCHJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,'
      .. '"p50_us":%d,"p99_us":%d,"statuses":{%s}}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), table.concat(parts, ",")))
end
