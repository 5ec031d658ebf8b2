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

# A test that fails is run once more on its own; one that then passes is reported as flaky at
# the end (and the run passes), one that fails again fails the run. A machine that is busier
# than usual can push a timing-bound test over its edge (a client's calls cancelled faster
# than a loaded server accepts them, a lease renewal late); five failures or more, a crash
# without a test summary, or extra test-binary arguments (`-- ...`) are not retried.
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
cargo test --no-fail-fast "$@" 2>&1 | tee "$log"
status="${PIPESTATUS[0]}"
set -e
[ "$status" = 0 ] && exit 0
for arg in "$@"; do
  [ "$arg" = "--" ] && exit "$status"
done

# "TARGET<TAB>TEST" for each failed test, TARGET as cargo test selects it (`--test NAME`,
# `--lib`, `--bin NAME`, `--doc`).
failed="$(awk '
  /^ *Running unittests src\/lib\.rs/ { target = "--lib"; next }
  /^ *Running unittests src\/main\.rs/ { target = "--bin matchmaker"; next }
  /^ *Running tests\// { n = $2; sub(/^tests\//, "", n); sub(/\.rs$/, "", n); target = "--test " n; next }
  /^ *Doc-tests / { target = "--doc"; next }
  /^---- .* stdout ----$/ { t = $0; sub(/^---- /, "", t); sub(/ stdout ----$/, "", t); print target "\t" t }
' "$log" | sort -u)"
# Targets cargo reports as failed must each have named their failed tests.
targets="$({
  grep -oE '^ +`[^`]+`$' "$log" || true
  grep -oE 'to rerun pass `[^`]+`' "$log" | sed 's/^to rerun pass //' || true
} | tr -d ' `')"
count="$(printf '%s\n' "$failed" | grep -c . || true)"
if [ -z "$failed" ] || [ "$count" -ge 5 ]; then
  exit "$status"
fi
for t in $targets; do
  printf '%s\n' "$failed" | cut -f1 | tr -d ' ' | grep -qxF -- "$t" || exit "$status"
done

echo "== running the ${count} failed test(s) once more"
flaky=()
while IFS= read -r target; do
  mapfile -t names < <(printf '%s\n' "$failed" | awk -F'\t' -v t="$target" '$1 == t { print $2 }')
  # shellcheck disable=SC2086 # the target is two words: `--test NAME`
  if ! cargo test "$@" $target -- --exact "${names[@]}"; then
    echo "test.sh: failed again: ${target} ${names[*]}" >&2
    exit "$status"
  fi
  for n in "${names[@]}"; do flaky+=("${target} ${n}"); done
done < <(printf '%s\n' "$failed" | cut -f1 | sort -u)

echo
echo "== FLAKY: these tests failed, then passed when run again on their own:" >&2
printf '   %s\n' "${flaky[@]}" >&2
exit 0
