#!/usr/bin/env bash
# Simultaneous A/B of two checkouts of the service (bench/PROFILE.md, "Measuring a change").
#
#   bash bench/ab.sh DIR_A DIR_B [SCENARIOS] [ROUNDS]
#   e.g. git worktree add --detach /tmp/base HEAD~1 && bash bench/ab.sh /tmp/base . "create32 read" 3
#
# On a shared VM the machine's speed drifts by up to 40 % within minutes, so two runs one
# after the other cannot tell a 5 % change from the drift. Here both services run at the same
# time on the same core (CPU 0), each loaded by its own wrk (16 connections) on CPU 1 with
# Redis, so any drift hits both alike. Each round prints the CPU time each worker spent per
# request (from /proc/PID/stat) and their quotient B/A: below 1 means B is cheaper.
# Absolute figures are higher than alone (two servers share a core); the quotient is what
# counts: it repeats within 1-4 % (alternating runs: 10-30 %). Needs redis-server, wrk, taskset.
set -euo pipefail
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); SCENARIOS=${3:-"create32 read verify"}; ROUNDS=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python}
tmp=$(mktemp -d); port_r=6391; port_a=8491; port_b=8492
cleanup() {
  kill "$pid_a" "$pid_b" 2>/dev/null || true; wait 2>/dev/null || true
  redis-cli -p $port_r shutdown nosave >/dev/null 2>&1 || true; rm -rf "$tmp"
}
trap cleanup EXIT
taskset -c 1 redis-server --port $port_r --save "" --appendonly no --daemonize yes --dir "$tmp" --logfile "$tmp/redis.log"
sleep 0.3
big=1000000000
plans="\"free\":{\"per_minute\":$big,\"monthly\":$big},\"basic\":{\"per_minute\":$big,\"monthly\":$big},\"pro\":{\"per_minute\":$big,\"monthly\":$big}"
ips="\"public_key\":$big,\"get_receipt\":$big,\"unauthenticated\":$big,\"authenticated\":$big"
export REDIS_URL=redis://127.0.0.1:$port_r/0 LOG_FORMAT=json LIMITS="{\"plans\":{$plans},\"ip_per_minute\":{$ips}}"
# One receipt root for both (a file of mode 0600, made as an operator makes one).
export RECEIPT_ROOT_KEY="file:$tmp/receipt-root.key"
(cd "$A" && $PY service.py signing-key root new --signer "$RECEIPT_ROOT_KEY" >/dev/null)
for i in $(seq 1 32); do
  (cd "$A" && $PY service.py keys create --project "ab-$i" --plan pro) |
    $PY -c "import json,sys; print(json.load(sys.stdin)['api_key'])" >> "$tmp/create32"
done
head -1 "$tmp/create32" > "$tmp/hot"
start() {  # DIR PORT METRICS_PORT -> the server's pid
  mkdir -p "$tmp/prom$2"
  (cd "$1" && METRICS_PORT=$3 PROMETHEUS_MULTIPROC_DIR="$tmp/prom$2" \
    exec taskset -c 0 $PY service.py serve --port "$2" --workers 1 > "$tmp/service$2.log" 2>&1) &
  echo $!
}
pid_a=$(start "$A" $port_a 9491); pid_b=$(start "$B" $port_b 9492)
for port in $port_a $port_b; do
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
done
# Receipts to read and verify, issued through A (both services share the Redis).
$PY - "$tmp" $port_a <<'EOF'
import json, secrets, sys, urllib.request
tmp, port = sys.argv[1], sys.argv[2]
keys = open(f"{tmp}/create32").read().split()
reads, verifies = [], []
for n in range(300):
    key, input_hash = keys[n % len(keys)], f"sha256:{secrets.token_hex(32)}"
    body = json.dumps({"input_hash": input_hash, "output_hash": "sha256:" + "b" * 64, "tags": {"stage": "ab"}})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/receipts", body.encode(), method="POST",
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    receipt_id = json.load(urllib.request.urlopen(request))["receipt"]["receipt_id"]
    reads.append(receipt_id)
    verifies.append(f"{key} {receipt_id} {input_hash}")
open(f"{tmp}/read", "w").write("\n".join(reads) + "\n")
open(f"{tmp}/verify", "w").write("\n".join(verifies) + "\n")
EOF
worker() { for p in $(pgrep -P "$(pgrep -f "service.py serve --port $1" | head -1)"); do
  echo "$(awk '{print $14+$15}' "/proc/$p/stat") $p"; done | sort -n | tail -1 | cut -d' ' -f2; }
ticks() { awk '{print $14+$15}' "/proc/$1/stat"; }
load() {  # PORT SCENARIO SECONDS OUT
  taskset -c 1 wrk -t 1 -c 16 -d "$3s" --timeout 10s -s "$HERE/scenario.lua" "http://127.0.0.1:$1" -- \
    "$2" "$tmp/$2" "$(openssl rand -hex 8)" > "$4"
}
requests() { sed -n 's/^BENCHJSON .*"requests":\([0-9]*\).*/\1/p' "$1"; }
p99() { sed -n 's/^BENCHJSON .*"p99_us":\([0-9]*\).*/\1/p' "$1"; }
statuses() { sed -n 's/^BENCHJSON .*"statuses":\({.*}\)}$/\1/p' "$1"; }
for scenario in $SCENARIOS; do
  load $port_a "$scenario" 2 /dev/null & load $port_b "$scenario" 2 /dev/null; wait  # warm-up
  for round in $(seq 1 "$ROUNDS"); do
    wa=$(worker $port_a); wb=$(worker $port_b); a0=$(ticks "$wa"); b0=$(ticks "$wb")
    load $port_a "$scenario" 6 "$tmp/out_a" & load $port_b "$scenario" 6 "$tmp/out_b"; wait
    a1=$(ticks "$wa"); b1=$(ticks "$wb")
    $PY -c "import sys; s, r, na, nb, a, b, sa, sb, pa, pb = sys.argv[1:]; ua = int(a) * 1e4 / int(na); ub = int(b) * 1e4 / int(nb)
print(f'{s} round {r}: A {ua:.0f} us/request ({na}, {sa}, {int(na) / 6:.0f}/s, p99 {int(pa) / 1e3:.2f} ms)  '
      f'B {ub:.0f} us/request ({nb}, {sb}, {int(nb) / 6:.0f}/s, p99 {int(pb) / 1e3:.2f} ms)  B/A {ub / ua:.3f}')" \
      "$scenario" "$round" "$(requests "$tmp/out_a")" "$(requests "$tmp/out_b")" $((a1 - a0)) $((b1 - b0)) \
      "$(statuses "$tmp/out_a")" "$(statuses "$tmp/out_b")" "$(p99 "$tmp/out_a")" "$(p99 "$tmp/out_b")"
  done
done
