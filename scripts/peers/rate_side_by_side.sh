#!/usr/bin/env bash
# tollgate's queue rate against BullMQ's `limiter`, on one private Redis,
# interleaved, ROUNDS times; one JSON line per case on stdout:
#   ROUNDS=3 bash scripts/peers/rate_side_by_side.sh > /tmp/rate.jsonl
# Needs a release build (cargo build --release -p tollgate-server) and
# ../shared/peers/node (BullMQ's pinned install). docs/BENCHMARKS.md.
set -uo pipefail
TG=${TG:-$PWD/target/release/tollgate}
[ -x "$TG" ] || { echo "no tollgate binary at $TG" >&2; exit 1; }
ROUNDS=${ROUNDS:-3}
PEERS=${PEERS:-$PWD/../shared/peers/node}
W=$(mktemp -d)
cp -r "$PEERS"/. "$W/" && cp "$(dirname "$0")/bullmq_limiter.mjs" "$W/"
(cd "$W" && npm install --no-audit --no-fund --loglevel=error >&2) || { echo "npm install failed" >&2; exit 1; }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --save "" --appendonly no --bind 127.0.0.1 --daemonize yes \
  --pidfile "$W/redis.pid" --logfile "$W/redis.log" --dir "$W" || exit 1
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1; rm -rf "$W"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
for r in $(seq "$ROUNDS"); do
  PEERS_REDIS_PORT=$PORT timeout 120 node "$W/bullmq_limiter.mjs" | sed "s/}\$/,\"round\":$r}/"
  redis-cli -p "$PORT" flushall >/dev/null
  "$TG" bench jobs --redis "redis://127.0.0.1:$PORT" --queue-rate 1000/s --workers 50 --seconds 10s | sed "s/}\$/,\"round\":$r}/"
  redis-cli -p "$PORT" flushall >/dev/null
done
