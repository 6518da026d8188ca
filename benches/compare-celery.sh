#!/usr/bin/env bash
# The item-job benchmark beside its peer: N `item.echo` items through mapi
# (`mapi bench jobs`, the embedded platform, deliverer running) and N echo
# tasks through Celery with a Redis broker and result backend (2 prefork
# workers, the machine's cores), in interleaved rounds on this machine.
# Prints each round's items/s and the ratio mapi / Celery; the goal is 2.
#
# Installs what it needs on first use: redis-server (Debian) and Celery
# (PyPI, pinned, into its own venv under ~/.cache/mapi-tools). Traffic stays
# on 127.0.0.1.
#
#   benches/compare-celery.sh [ITEMS] [ROUNDS]     # defaults: 5000 3
set -euo pipefail
cd "$(dirname "$0")/.."
readonly items=${1:-5000} rounds=${2:-3}
readonly celery_version=5.5.3 redis_py_version=6.2.0
readonly venv=${HOME:-/tmp}/.cache/mapi-tools/celery-$celery_version
readonly mapi=target/release/mapi

[ -x "$mapi" ] || cargo build --release -p mapi-cli --bin mapi
if ! command -v redis-server >/dev/null; then
  apt-get update -qq && apt-get install -y -qq redis-server
fi
if [ ! -x "$venv/bin/celery" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "celery==$celery_version" "redis==$redis_py_version"
fi

work=$(mktemp -d)
redis_port=6399
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
  --pidfile "$work/redis.pid" --dir "$work" >/dev/null
worker_pid=""
cleanup() {
  [ -n "$worker_pid" ] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null
  [ -f "$work/redis.pid" ] && kill "$(cat "$work/redis.pid")" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/echo_app.py" <<PY
from celery import Celery
app = Celery("echo", broker="redis://127.0.0.1:$redis_port/0", backend="redis://127.0.0.1:$redis_port/1")
app.conf.update(task_acks_late=True, worker_prefetch_multiplier=4, result_expires=3600)

@app.task
def echo(item):
    return item
PY
cat >"$work/drive.py" <<'PY'
import json, sys, time
from celery import group
from echo_app import echo
n = int(sys.argv[1])
items = [{"i": i, "text": f"item {i}"} for i in range(n)]
start = time.monotonic()
result = group(echo.s(item) for item in items).apply_async()
out = result.get(timeout=600)
took = time.monotonic() - start
assert out == items, "every result, in order"
print(json.dumps({"items": n, "seconds": took, "items_per_s": n / took}))
PY
(cd "$work" && exec "$venv/bin/celery" -A echo_app worker --concurrency 2 --pool prefork --loglevel WARNING) \
  >"$work/worker.log" 2>&1 &
worker_pid=$!
sleep 3

mapi_rate() {
  "$mapi" bench jobs --sizes 10 --samples 1 --e2e-items "$items" --json \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["e2e_items_per_s"])'
}
celery_rate() {
  (cd "$work" && "$venv/bin/python" drive.py "$items") | python3 -c 'import json,sys; print(json.load(sys.stdin)["items_per_s"])'
}

printf 'round\tload\tmapi items/s\tcelery items/s\tratio\n'
for r in $(seq "$rounds"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  m=$(mapi_rate)
  c=$(celery_rate)
  printf '%s\t%s\t%.0f\t%.0f\t%.2f\n' "$r" "$load" "$m" "$c" "$(python3 -c "print($m / $c)")"
done
