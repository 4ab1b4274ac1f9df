#!/usr/bin/env bash
# Profile the service's create path under load (bench/PROFILE.md): a Redis on port 6390, the
# service on 8390 (1 worker, CPU 0), wrk create32 over 4 projects on CPU 1, and py-spy on the
# busiest Python process (the Sanic worker) for 15 s. Writes /tmp/prof/create.raw (py-spy raw
# stacks). Needs wrk and py-spy (pip install py-spy). Run: bash bench/profile_create.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=/tmp/prof
mkdir -p "$out"
. bench/profile_setup.sh
profile_setup "$out" 6390 9399
: > "$out/keys.txt"
for i in 1 2 3 4; do
  python service.py keys create --project "prof-$i" --plan pro | python -c "import json,sys; print(json.load(sys.stdin)['api_key'])" >> "$out/keys.txt"
done
taskset -c 0 python service.py serve --port 8390 --workers 1 2> "$out/service.log" &
sleep 3
taskset -c 1 wrk -t 2 -c 32 -d 22s --timeout 10s -s bench/scenario.lua http://127.0.0.1:8390 -- create32 "$out/keys.txt" 0123456789abcdef > "$out/wrk.txt" &
sleep 3
worker=$(ps -eo pid,pcpu,args --sort=-pcpu | awk '/python/ && !/awk/ {print $1; exit}')
py-spy record -p "$worker" -d 15 -r 200 -f raw -o "$out/create.raw" --nonblocking
wait %2
