#!/usr/bin/env bash
# Regenerates the console screenshots in docs/console/ (referenced by docs/console.md): runs the
# console's browser tests (tests/console.rs: the real server under `matchmaker loadgen` traffic,
# driven by headless Chromium) with MATCHMAKER_CONSOLE_SCREENSHOTS pointing there. Needs
# Debian's chromium (scripts/test.sh installs it when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/console
MATCHMAKER_CONSOLE_SCREENSHOTS="$PWD/docs/console" exec cargo test --test console "$@"
