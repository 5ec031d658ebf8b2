#!/usr/bin/env bash
# Runs every test: unit, property and integration. Integration tests start the real server on
# 127.0.0.1 with temporary data directories; the cluster tests also start a real redis-server
# (on a free loopback port, in a temporary directory), so this installs it from Debian first
# when it is missing and we are root. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1 && ! command -v valkey-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing redis-server (Debian) for the cluster tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends redis-server >/dev/null
  else
    echo "test.sh: redis-server is missing and cannot be installed here;" >&2
    echo "  install it (Debian/Ubuntu: sudo apt-get install -y redis-server) and run again" >&2
    exit 1
  fi
fi

exec cargo test "$@"
