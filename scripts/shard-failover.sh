#!/usr/bin/env bash
# Failover of one shard: two cluster nodes on a local redis-server, 2v2 in shard `eu`, the rest in
# the home shard. Ten times: wait until the two shards are held by different nodes, kill -9 the
# owner of `eu`, and time how long until the other node holds `eu`'s lease (the home shard stays
# where it was); then start the killed node again.
#
#   scripts/shard-failover.sh [MATCHMAKER_BINARY] [LEASE_MS]
set -euo pipefail
BIN=${1:-target/release/matchmaker}
LEASE_MS=${2:-1000}
. "$(dirname "$0")/redis-lib.sh"
cat > "$DIR/node.toml" <<TOML
[server]
tick_interval_ms = 20
[cluster]
redis_url = "redis://127.0.0.1:$PORT/0"
lease_ms = $LEASE_MS
[[cluster.shards]]
keyspace = "eu"
queues = ["2v2"]
TOML
start() {
  MATCHMAKER_CLUSTER__NODE_ID=$1 "$BIN" serve --config "$DIR/node.toml" --addr 127.0.0.1:0 \
    --metrics-addr "" >"$DIR/$1.log" 2>&1 &
  echo $! >"$DIR/$1.pid"
}
owner() { redis-cli -p "$PORT" GET "{$1}:lease" | cut -d'|' -f2; }
start a
start b
for i in $(seq 1 10); do
  for _ in $(seq 1 600); do
    home=$(owner mm); eu=$(owner eu)
    [ -n "$home" ] && [ -n "$eu" ] && [ "$home" != "$eu" ] && break
    sleep 0.05
  done
  t0=$(date +%s%N)
  kill -9 "$(cat "$DIR/$eu.pid")"
  wait "$(cat "$DIR/$eu.pid")" 2>/dev/null || true
  for _ in $(seq 1 3000); do [ "$(owner eu)" = "$home" ] && break; sleep 0.01; done
  t1=$(date +%s%N)
  echo "kill $i: $(((t1 - t0) / 1000000)) ms; the home shard stayed with $(owner mm) (was $home)"
  start "$eu"
  sleep 1
done
