#!/usr/bin/env bash
# Runs every test: unit, property and integration. Integration tests start the real server on
# 127.0.0.1 with temporary data directories; the cluster tests also start a real redis-server
# (on a free loopback port, in a temporary directory), so this installs it from Debian first
# when it is missing and we are root; likewise chromium and firefox-esr for the operator
# console's browser tests.
# Extra arguments go to `cargo test`.
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

# The operator console's tests (tests/console.rs) drive a headless Chromium: Debian's package.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
  && ! command -v google-chrome >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing chromium (Debian) for the console tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
  else
    echo "test.sh: chromium is missing and cannot be installed here;" >&2
    echo "  install it (Debian: sudo apt-get install -y chromium) and run again" >&2
    exit 1
  fi
fi

# ... and the same views in a headless Firefox: Debian's firefox-esr.
if ! command -v firefox-esr >/dev/null 2>&1 && ! command -v firefox >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== installing firefox-esr (Debian) for the console tests"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends firefox-esr >/dev/null
  else
    echo "test.sh: firefox-esr is missing and cannot be installed here;" >&2
    echo "  install it (Debian: sudo apt-get install -y firefox-esr) and run again" >&2
    exit 1
  fi
fi

exec cargo test "$@"
