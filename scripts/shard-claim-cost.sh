#!/usr/bin/env bash
# What claiming players across shards costs EnterQueue: on one local redis-server, a one-shard
# cluster node (keyspace `u`) and a node of a two-shard cluster (home `mm`, 2v2 in `eu`: it
# owns both and claims every player it queues), each alone in its cluster. The load generator
# enters fresh solo players in 1v1 on each in turn, three times.
#
#   scripts/shard-claim-cost.sh [MATCHMAKER_BINARY]
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
for round in 1 2 3; do
  for side in u s; do
    "$BIN" loadgen --addr "${ADDR[$side]}" --rpc enter-queue --seconds 6 --rounds 3 \
      --concurrency 64 --json >"$DIR/$side.json"
    python3 -c "import json; t=json.load(open('$DIR/$side.json'))['target']; \
print('round $round', 'one shard ' if '$side' == 'u' else 'two shards', \
'EnterQueue/s', round(t['rps']), 'p99 ms', t['p99_ms'], 'errors', t['errors'])"
  done
done
