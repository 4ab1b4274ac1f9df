# Sourced by bench/profile_create.sh and bench/profile_read.sh: what both profiles stand on.
# profile_setup OUT REDIS_PORT METRICS_PORT: a Redis without persistence on REDIS_PORT (its files
# in OUT), stopped with every background job when the script exits; the service's environment
# (JSON request lines, metrics on METRICS_PORT, a fresh receipt root in OUT, bench/harness.py's
# RAISED_LIMITS: every counter runs, none refuses).
profile_setup() {
  local out=$1 redis_port=$2 metrics_port=$3
  redis-server --port "$redis_port" --save "" --appendonly no --daemonize yes --dir "$out" --logfile "$out/redis.log"
  # shellcheck disable=SC2064 # the port is fixed now, on purpose
  trap "kill \$(jobs -p) 2>/dev/null || true; redis-cli -p $redis_port shutdown nosave >/dev/null 2>&1 || true" EXIT
  sleep 0.5
  export REDIS_URL=redis://127.0.0.1:$redis_port/0 LOG_FORMAT=json METRICS_PORT=$metrics_port
  RECEIPT_ROOT_KEY="file:$(cd "$out" && pwd)/receipt-root.key"  # a file of mode 0600, new each run
  rm -f "${RECEIPT_ROOT_KEY#file:}"
  python service.py signing-key root new --signer "$RECEIPT_ROOT_KEY" >/dev/null
  LIMITS="$(python -c 'import orjson; from bench.harness import RAISED_LIMITS; print(orjson.dumps(RAISED_LIMITS).decode())')"
  export RECEIPT_ROOT_KEY LIMITS
}
