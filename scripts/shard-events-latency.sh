#!/usr/bin/env bash
# How long an event takes to reach a `WatchEvents` watcher with the queues split over shards
# (every shard's stream merged in cursor order) against one shard. On one local redis-server,
# a one-shard cluster node (keyspace `u`) and a node of a two-shard cluster (home `mm`, 2v2 in
# `eu`; it owns both), each alone in its cluster. A watcher follows rating changes on each
# while admin calls set 100 ratings, alternating between 1v1 and 2v2 on the two-shard node;
# the delay is the watcher's clock at arrival less the event's time (Redis's clock, on the
# same machine).
#
#   scripts/shard-events-latency.sh [MATCHMAKER_BINARY]
set -euo pipefail
BIN=${1:-target/release/matchmaker}
. "$(dirname "$0")/redis-lib.sh"
printf '[cluster]\nredis_url = "redis://127.0.0.1:%s/0"\nkeyspace = "u"\n' "$PORT" >"$DIR/u.toml"
printf '[cluster]\nredis_url = "redis://127.0.0.1:%s/0"\n[[cluster.shards]]\nkeyspace = "eu"\nqueues = ["2v2"]\n' \
  "$PORT" >"$DIR/s.toml"
declare -A ADDR
for side in u s; do
  ADDR[$side]=127.0.0.1:$(free_port)
  "$BIN" serve --config "$DIR/$side.toml" --addr "${ADDR[$side]}" --metrics-addr "" >"$DIR/$side.log" 2>&1 &
  echo $! >"$DIR/$side.pid"
done
sleep 4
for side in u s; do
  # Each line stamped with the watcher's clock as it arrives.
  "$BIN" admin --addr "${ADDR[$side]}" --json events --kind rating-changed --count 100 |
    python3 -u -c "import sys, time
for line in sys.stdin: print(time.time(), line, end='')" >"$DIR/$side.events" &
  echo $! >"$DIR/watch-$side.pid"
  sleep 1
  for i in $(seq 1 100); do
    queue=1v1
    if [ "$side" = s ] && [ $((i % 2)) = 0 ]; then queue=2v2; fi
    "$BIN" admin --addr "${ADDR[$side]}" set-rating --player "p$i" --queue "$queue" \
      --mean 1500 --deviation 100 >/dev/null
    sleep 0.02
  done
  wait "$(cat "$DIR/watch-$side.pid")" 2>/dev/null || true
  python3 - "$DIR/$side.events" "$side" <<'PY'
import json, sys
delays = []
for line in open(sys.argv[1]):
    at, event = line.split(' ', 1)
    delays.append((float(at) - json.loads(event)['unix']) * 1000)
delays.sort()
pick = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]
print('one shard ' if sys.argv[2] == 'u' else 'two shards', 'events', len(delays),
      'delay ms p50 %.1f p90 %.1f p99 %.1f max %.1f' % (pick(0.5), pick(0.9), pick(0.99), delays[-1]))
PY
done
