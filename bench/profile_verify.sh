#!/usr/bin/env bash
# Profile the service's verify path under load (bench/PROFILE.md): a Redis on port 6393, the
# service on 8393 (1 worker, CPU 0), 200 receipts made (each after the one before it: every
# verify also finds the previous receipt), bench/loadgen.py verifying them over 16 connections
# on CPU 1 for 22 s, and py-spy on the Sanic worker for 15 s. Writes /tmp/prof/verify/verify.raw
# (py-spy raw stacks) and the load's result line. Needs redis-server and py-spy (pip install
# py-spy); no wrk. Run from the checkout's venv: bash bench/profile_verify.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=/tmp/prof/verify
rm -rf "$out"
mkdir -p "$out"
. bench/profile_setup.sh
profile_setup "$out" 6393 9393
key=$(python service.py keys create --project prof-verify --plan pro | python -c "import json,sys; print(json.load(sys.stdin)['api_key'])")
taskset -c 0 python service.py serve --port 8393 --workers 1 2> "$out/service.log" &
for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8393/health && break; sleep 0.2; done
python - "$key" "$out/spec.json" <<'PY'
import hashlib, json, sys
import httpx
key, spec_path = sys.argv[1], sys.argv[2]
items = []
with httpx.Client(base_url="http://127.0.0.1:8393", headers={"Authorization": f"Bearer {key}"}) as client:
    for n in range(200):
        input_hash = "sha256:" + hashlib.sha256(str(n).encode()).hexdigest()
        made = client.post("/v1/receipts", json={"input_hash": input_hash})
        assert made.status_code == 201, made.text
        items.append(f"{key} {made.json()['receipt']['receipt_id']} {input_hash}")
spec = {"target_host": "127.0.0.1", "target_port": 8393, "host": "127.0.0.1:8393", "connections": 16,
        "seconds": 22, "mode": "verify", "items": items, "nonce": "0123456789abcdef"}
json.dump(spec, open(spec_path, "w"))
PY
taskset -c 1 python -m bench.loadgen run "$out/spec.json" > "$out/load.txt" &
sleep 4
worker=$(ps -eo pid,pcpu,args --sort=-pcpu | awk '/python/ && /spawn_main/ && !/awk/ {print $1; exit}')
py-spy record -p "$worker" -d 15 -r 200 -f raw -o "$out/verify.raw" --nonblocking > /dev/null 2>&1
wait %2 || true
grep -o 'BENCHJSON.*' "$out/load.txt"
