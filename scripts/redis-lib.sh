# Sourced by the shard measurement scripts: a throwaway redis-server on a free loopback port,
# in a temporary directory (DIR, PORT), stopped with every process whose pid file is in DIR
# (`DIR/*.pid`) when the script exits.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
DIR=$(mktemp -d)
PORT=$(free_port)
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$DIR" --appendonly yes --save "" \
  --daemonize yes --logfile "$DIR/redis.log" >/dev/null
cleanup() {
  for f in "$DIR"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true; done
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
