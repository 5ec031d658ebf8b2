#!/usr/bin/env bash
# Runs the Node example clients (examples/node-client) against the real server; exits non-zero
# on any problem.
#
#   npm start          two players into a 1v1 match over gRPC (@grpc/grpc-js), a game server
#                      takes it: a MATCHED line per player with the match and the server address
#   npm run grpc-web   one player over grpc-web on HTTP/1.1, binary and base64 ("text") bodies,
#                      from a browser origin the server allows: ticket, stream, trailer status
#   both again with auth on, carrying `authorization: Bearer <JWT>`; refused without it
#
# The server is `target/debug/matchmaker` (built by the cargo steps before this one; built here
# if missing or older than the sources; MATCHMAKER_BIN overrides), started on 127.0.0.1 on a
# port it picks, with a temporary data directory and grpc-web on, and stopped with SIGTERM.
# The example's npm packages are installed with `npm ci` from its lockfile into
# examples/node-client/node_modules (npm's own cache makes repeat installs offline). A missing
# node or npm is installed from Debian when running as root, never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

EXAMPLE=examples/node-client
unset MATCHMAKER_TOKEN # each client run below sets its own
ORIGIN=http://localhost:8000 # the browser origin the grpc-web runs call from
CLIENT_TIMEOUT_S=20          # each client run's own bound
STARTUP_TIMEOUT_S=30
STOP_TIMEOUT_S=20

started=$(date +%s)
step_started=$started
step() {
  local now
  now=$(date +%s)
  echo "   took $((now - step_started)) s"
  step_started=$now
  echo "-- $*"
}
die() {
  echo "check-clients: $*" >&2
  exit 1
}

scratch=$(mktemp -d)
server_pid=""
# Stops the server: SIGTERM, then wait (bounded) for it to exit; a non-zero exit is a failure.
stop_server() {
  local pid=$server_pid status=0
  server_pid=""
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $((STOP_TIMEOUT_S * 10))); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    echo "server did not stop within ${STOP_TIMEOUT_S} s of SIGTERM" >&2
    return 1
  fi
  wait "$pid" || status=$?
  if [[ $status -ne 0 ]]; then
    echo "server exited with status $status after SIGTERM" >&2
    return 1
  fi
}
cleanup() {
  local status=$?
  stop_server || status=1
  rm -rf "$scratch"
  exit "$status"
}
trap cleanup EXIT

# Starts the server on 127.0.0.1, port 0 (it picks a free one and logs it); sets $addr.
# Extra arguments are NAME=VALUE config variables.
start_server() {
  local name=$1
  shift
  local log="$scratch/$name.log"
  env RUST_LOG=info MATCHMAKER_SERVER__GRPC_WEB=true \
    "MATCHMAKER_SERVER__GRPC_WEB_ORIGINS=[\"$ORIGIN\"]" "$@" \
    "$bin" serve --addr 127.0.0.1:0 --metrics-addr "" --data-dir "$scratch/$name-data" \
    >"$log" 2>&1 &
  server_pid=$!
  addr=""
  for _ in $(seq $((STARTUP_TIMEOUT_S * 10))); do
    addr=$(sed -n 's/.*serving gRPC addr=\(127\.0\.0\.1:[0-9]*\).*/\1/p' "$log" | head -n 1)
    [[ -n $addr ]] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
      wait "$server_pid" || true
      server_pid=""
      cat "$log" >&2
      die "the server ($name) exited at start"
    fi
    sleep 0.1
  done
  if [[ -z $addr ]]; then
    cat "$log" >&2
    die "the server ($name) did not log its address within ${STARTUP_TIMEOUT_S} s"
  fi
  echo "   server ($name) on $addr, pid $server_pid"
}

# Runs an npm script of the example, bounded; its output goes to stdout and to $out.
run_client() {
  local status=0
  out=$(cd "$EXAMPLE" && timeout $((CLIENT_TIMEOUT_S + 10)) npm run --silent "$@" 2>&1) || status=$?
  printf '%s\n' "$out" | sed 's/^/   | /'
  return "$status"
}

# The output of `npm start` must hold one MATCHED line per player, both in the same match, with
# a match id and a game server's address.
check_matched() {
  local lines matches
  lines=$(grep -E '^MATCHED player \S+ ticket t-\S+ match m-\S+ server \S+ ' <<<"$out" || true)
  [[ $(grep -c . <<<"$lines") -eq 2 ]] || die "npm start: expected 2 MATCHED lines with match and server, got: ${lines:-none}"
  [[ $(awk '{print $3}' <<<"$lines" | sort -u | wc -l) -eq 2 ]] || die "npm start: the MATCHED lines are not for two players"
  matches=$(awk '{print $7}' <<<"$lines" | sort -u)
  [[ $(wc -l <<<"$matches") -eq 1 ]] || die "npm start: the players are in different matches: $matches"
}

# The output of `npm run grpc-web` must show a ticket with grpc-status 0 from the trailer frame,
# a watch stream that ended with status 0, and a refusal with its status.
check_grpc_web() {
  local mode=$1
  grep -qE "^$mode EnterQueue: ticket t-\S+ grpc-status 0 \(from the trailer frame\)" <<<"$out" ||
    die "grpc-web ($mode): no ticket with grpc-status 0 from the trailer frame"
  grep -qE "^$mode WatchTicket: stream ended after [0-9]+ updates, grpc-status 0 \(from the trailer frame\)" <<<"$out" ||
    die "grpc-web ($mode): the WatchTicket stream did not end with grpc-status 0"
  grep -qE "^$mode EnterQueue with no players: grpc-status 3 " <<<"$out" ||
    die "grpc-web ($mode): the refusal did not carry INVALID_ARGUMENT"
}

echo "-- node and npm"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  [[ $(id -u) -eq 0 ]] || die "node and npm are missing; install Node.js 18 or newer (as root this script installs Debian's nodejs and npm)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
[[ $node_major -ge 18 ]] || die "Node.js $(node --version) is too old: the example needs 18 or newer (fetch, util.parseArgs)"
echo "   node $(node --version), npm $(npm --version 2>/dev/null)"

step "npm ci in $EXAMPLE"
(cd "$EXAMPLE" && npm ci --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error)

step "the server binary"
bin="${MATCHMAKER_BIN:-${CARGO_TARGET_DIR:-target}/debug/matchmaker}"
if [[ -z ${MATCHMAKER_BIN:-} ]]; then
  if [[ ! -x $bin ]] || [[ -n $(find src proto config build.rs Cargo.toml Cargo.lock -newer "$bin" -print -quit) ]]; then
    echo "   $bin is missing or older than the sources: cargo build"
    cargo build --locked --bin matchmaker
  fi
fi
[[ -x $bin ]] || die "no server binary at $bin"
echo "   $bin"

step "server with grpc-web on, auth off"
start_server open

step "npm start (gRPC): two players into 1v1"
run_client start -- "$addr" --timeout-s "$CLIENT_TIMEOUT_S" || die "npm start failed"
check_matched

for mode in grpc-web grpc-web-text; do
  flag=()
  [[ $mode == grpc-web-text ]] && flag=(--text)
  step "npm run grpc-web ($mode, from $ORIGIN)"
  run_client grpc-web -- "$addr" "${flag[@]}" --origin "$ORIGIN" --timeout-s "$CLIENT_TIMEOUT_S" ||
    die "npm run grpc-web ($mode) failed"
  check_grpc_web "$mode"
done

step "stop the server (SIGTERM)"
stop_server || die "the server did not stop cleanly"

step "server with auth on (HS256)"
secret=$(node -p 'require("node:crypto").randomBytes(32).toString("hex")')
start_server auth MATCHMAKER_AUTH__ENABLED=true "MATCHMAKER_AUTH__JWT_SECRET=$secret"
# An admin token (sub, role, exp) signed with the server's secret: it may act for both players
# and as the game server.
# shellcheck disable=SC2016 # JavaScript template literals, not shell expansions
token=$(node -e '
const crypto = require("node:crypto");
const part = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
const body = `${part({ alg: "HS256", typ: "JWT" })}.${part({ sub: "check-clients", role: "admin", exp: Math.floor(Date.now() / 1000) + 600 })}`;
console.log(`${body}.${crypto.createHmac("sha256", process.argv[1]).update(body).digest("base64url")}`);
' "$secret")

step "npm start without a token: refused"
if MATCHMAKER_TOKEN="" run_client start -- "$addr" --timeout-s "$CLIENT_TIMEOUT_S"; then
  die "npm start succeeded without a token against a server with auth on"
fi
grep -q 'UNAUTHENTICATED' <<<"$out" || die "npm start without a token: expected UNAUTHENTICATED"

step "npm start with authorization: Bearer <JWT>"
MATCHMAKER_TOKEN="$token" run_client start -- "$addr" --timeout-s "$CLIENT_TIMEOUT_S" || die "npm start with a token failed"
check_matched

step "npm run grpc-web with authorization: Bearer <JWT>"
MATCHMAKER_TOKEN="$token" run_client grpc-web -- "$addr" --origin "$ORIGIN" --timeout-s "$CLIENT_TIMEOUT_S" ||
  die "npm run grpc-web with a token failed"
check_grpc_web grpc-web

step "stop the server (SIGTERM)"
stop_server || die "the server did not stop cleanly"

step "done"
echo "   check-clients: all checks passed in $(($(date +%s) - started)) s"
