#!/usr/bin/env bash
# Profile the service's public read path (or, with the argument verify, its verify path) under
# load (bench/PROFILE.md, profiles 5 and 6): a Redis of its own, the service (1 worker, CPU 0),
# 200 receipts made (each after the one before it: a verify also finds the previous receipt),
# bench/loadgen.py reading or verifying them over 16 connections on CPU 1 for 22 s, and py-spy
# on the Sanic worker for 15 s. Writes /tmp/prof/MODE/MODE.raw (py-spy raw stacks) and prints
# the load's result line. Needs redis-server and py-spy (pip install py-spy); no wrk.
# Run from the checkout's venv: bash bench/profile_read.sh [read|verify]
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-read}
case "$mode" in
  read) redis_port=6391 metrics_port=9391 port=8391 ;;
  verify) redis_port=6393 metrics_port=9393 port=8393 ;;
  *) echo "usage: bash bench/profile_read.sh [read|verify]" >&2; exit 2 ;;
esac
out=/tmp/prof/$mode
rm -rf "$out"
mkdir -p "$out"
. bench/profile_setup.sh
profile_setup "$out" "$redis_port" "$metrics_port"
key=$(python service.py keys create --project "prof-$mode" --plan pro | python -c "import json,sys; print(json.load(sys.stdin)['api_key'])")
taskset -c 0 python service.py serve --port "$port" --workers 1 2> "$out/service.log" &
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/health" && break; sleep 0.2; done
python - "$key" "$out/spec.json" "$port" "$mode" <<'PY'
import hashlib, json, sys
import httpx
key, spec_path, port, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
items = []
with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}) as client:
    for n in range(200):
        input_hash = "sha256:" + hashlib.sha256(str(n).encode()).hexdigest()
        made = client.post("/v1/receipts", json={"input_hash": input_hash})
        assert made.status_code == 201, made.text
        receipt_id = made.json()["receipt"]["receipt_id"]
        items.append(receipt_id if mode == "read" else f"{key} {receipt_id} {input_hash}")
spec = {"target_host": "127.0.0.1", "target_port": port, "host": f"127.0.0.1:{port}", "connections": 16,
        "seconds": 22, "mode": mode, "items": items, "nonce": "0123456789abcdef"}
json.dump(spec, open(spec_path, "w"))
PY
taskset -c 1 python -m bench.loadgen run "$out/spec.json" > "$out/load.txt" &
sleep 4
worker=$(ps -eo pid,pcpu,args --sort=-pcpu | awk '/python/ && /spawn_main/ && !/awk/ {print $1; exit}')
py-spy record -p "$worker" -d 15 -r 200 -f raw -o "$out/$mode.raw" --nonblocking > /dev/null 2>&1
wait %2 || true
grep -o 'BENCHJSON.*' "$out/load.txt"
