#!/usr/bin/env bash
# A local npm registry (verdaccio) and a local PyPI index (pypiserver) for the upstream-releases tests,
# each on a free loopback port. See tests/upstream/README.md.
#   scripts/upstream-registries.sh up                   (re)start both, empty of test packages; print the env file
#   scripts/upstream-registries.sh publish-npm DIR [npm publish options...]    e.g. tests/upstream/npm/weather-1.0.0
#   scripts/upstream-registries.sh publish-pypi NAME VERSION | WHEEL           e.g. driftline-test-weather 1.0.0
#   scripts/upstream-registries.sh down                 stop both
# Everything lives under target/upstream (UPSTREAM_DIR): verdaccio's install and pypiserver's venv, the
# PyPI wheels of the test packages' dependencies and the test wheels are cached there; the registries'
# contents are not (each `up` starts them empty, but for the dependencies). Quiet on success; on failure
# it says what and shows the tail of the log. Idempotent.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SRC="$REPO/tests/upstream"
ROOT=${UPSTREAM_DIR:-$REPO/target/upstream}
ENV_FILE="$ROOT/env"
VENV="$ROOT/venv"
# pip: nothing from a find-links folder a machine may set; the index is pypi.org, or the caller's.
unset PIP_FIND_LINKS PIP_NO_INDEX
export PIP_DISABLE_PIP_VERSION_CHECK=1
NAME=upstream-registries
STATE="$ROOT/run"
LOG=/dev/null
# shellcheck source=../deploy/local/lib.sh
. "$REPO/deploy/local/lib.sh"

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

install_verdaccio() {
  local dir="$ROOT/verdaccio-install" key
  key=$(hash_of "$SRC/verdaccio/package.json" "$SRC/verdaccio/package-lock.json")
  [ "$(cat "$dir/.installed" 2>/dev/null)" = "$key" ] && [ -x "$dir/node_modules/.bin/verdaccio" ] && return 0
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$SRC/verdaccio/package.json" "$SRC/verdaccio/package-lock.json" "$dir/"
  run "$ROOT/run/verdaccio-install.log" "npm ci of verdaccio (tests/upstream/verdaccio)" \
    npm ci --prefix "$dir" --no-audit --no-fund
  echo "$key" >"$dir/.installed"
}

install_venv() {
  local key
  key=$(hash_of "$SRC/requirements.txt" <(python3 --version))
  [ "$(cat "$VENV/.installed" 2>/dev/null)" = "$key" ] && [ -x "$VENV/bin/python" ] && return 0
  rm -rf "$VENV"
  run "$ROOT/run/venv.log" "creating the venv $VENV" python3 -m venv "$VENV"
  run "$ROOT/run/venv.log" "pip install -r tests/upstream/requirements.txt" \
    "$VENV/bin/pip" install -q -r "$SRC/requirements.txt"
  echo "$key" >"$VENV/.installed"
}

# The test wheels, built once per source: target/upstream/wheels/<name>-<version>-py3-none-any.whl.
build_wheels() {
  local dir key tmp
  mkdir -p "$ROOT/wheels"
  for dir in "$SRC"/pypi/*/; do
    dir=${dir%/}
    key=$(hash_of <(cd "$dir" && find . -type f ! -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum) \
      "$VENV/.installed")
    [ "$(cat "$ROOT/wheels/.$(basename "$dir").built" 2>/dev/null)" = "$key" ] && continue
    # built from a copy: setuptools leaves build/ and *.egg-info beside the sources
    tmp=$(mktemp -d)
    cp -r "$dir/." "$tmp/"
    run "$ROOT/run/wheels.log" "building the wheel of tests/upstream/pypi/$(basename "$dir")" \
      "$VENV/bin/pip" wheel -q --no-deps --no-build-isolation --no-index -w "$ROOT/wheels" "$tmp"
    rm -rf "$tmp"
    echo "$key" >"$ROOT/wheels/.$(basename "$dir").built"
  done
}

# The wheels of the test packages' dependencies (mcp and all it needs, for this python and platform),
# fetched once from the index into target/upstream/pypi-cache/<key>/.
fetch_dependencies() {
  local reqs key
  reqs=$(sed -n 's/^dependencies = \[\(.*\)\]$/\1/p' "$SRC"/pypi/*/pyproject.toml | tr -d '" ' | tr ',' '\n' \
    | LC_ALL=C sort -u)
  key=$(hash_of <(echo "$reqs") <("$VENV/bin/python" -c 'import sys, sysconfig; print(sys.version, sysconfig.get_platform())'))
  DEPS="$ROOT/pypi-cache/$key"
  [ -f "$DEPS/.complete" ] && return 0
  rm -rf "$DEPS"
  mkdir -p "$DEPS"
  # shellcheck disable=SC2086
  run "$ROOT/run/pypi-cache.log" "pip download of the test packages' dependencies ($(echo $reqs))" \
    "$VENV/bin/pip" download -q --only-binary=:all: --no-cache-dir -d "$DEPS" $reqs
  touch "$DEPS/.complete"
}

verdaccio_ready() { answers "http://127.0.0.1:$NPM_PORT/-/ping"; }
pypi_ready() { answers "http://127.0.0.1:$PYPI_PORT/health"; }

up() {
  mkdir -p "$ROOT/run"
  down
  install_verdaccio
  install_venv
  build_wheels
  fetch_dependencies

  rm -rf "$ROOT/verdaccio-storage" "$ROOT/pypi-packages"
  mkdir -p "$ROOT/verdaccio-storage" "$ROOT/pypi-packages"
  cp -l "$DEPS"/*.whl "$ROOT/pypi-packages/" 2>/dev/null || cp "$DEPS"/*.whl "$ROOT/pypi-packages/"

  NPM_PORT=$(free_port)
  NAME=verdaccio STATE="$ROOT/run/verdaccio" LOG="$ROOT/run/verdaccio/log"
  mkdir -p "$STATE"
  : >"$LOG"
  export VERDACCIO_STORAGE_PATH="$ROOT/verdaccio-storage"
  start_and_wait verdaccio_ready \
    "$ROOT/verdaccio-install/node_modules/.bin/verdaccio" --config "$SRC/verdaccio/config.yaml" \
    --listen "127.0.0.1:$NPM_PORT"

  PYPI_PORT=$(free_port)
  NAME=pypiserver STATE="$ROOT/run/pypiserver" LOG="$ROOT/run/pypiserver/log"
  mkdir -p "$STATE"
  : >"$LOG"
  start_and_wait pypi_ready "$VENV/bin/python" "$SRC/pypi_index.py" --port "$PYPI_PORT" "$ROOT/pypi-packages"

  cat >"$ENV_FILE" <<ENV
NPM_REGISTRY=http://127.0.0.1:$NPM_PORT/
PYPI_INDEX=http://127.0.0.1:$PYPI_PORT/simple/
PYPI_JSON=http://127.0.0.1:$PYPI_PORT/pypi/
ENV
  cat "$ENV_FILE"
}

down() {
  # both at once: each may take a second or two to go
  NAME=verdaccio STATE="$ROOT/run/verdaccio" stop &
  NAME=pypiserver STATE="$ROOT/run/pypiserver" stop &
  wait
  rm -f "$ENV_FILE"
}

publish_npm() {
  [ $# -ge 1 ] && [ -f "$1/package.json" ] || { echo "usage: $0 publish-npm DIR [npm publish options...]" >&2; exit 2; }
  local dir=$1
  shift
  load_env
  # npm will not publish without a credential for the registry; verdaccio lets anyone publish the test
  # scope and ignores this one.
  local npmrc log
  npmrc=$(mktemp)
  log=$(mktemp)
  echo "//${NPM_REGISTRY#http://}:_authToken=anonymous" >"$npmrc"
  if ! npm publish "$dir" --registry "$NPM_REGISTRY" --userconfig "$npmrc" --access public "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$npmrc" "$log"
    echo "$NAME: npm publish $dir to $NPM_REGISTRY failed" >&2
    exit 1
  fi
  rm -f "$npmrc" "$log"
}

publish_pypi() {
  local wheel
  case $# in
    1) wheel=$1 ;;
    2) wheel=$(ls "$ROOT/wheels/$(echo "$1" | tr 'A-Z.-' 'a-z__')-$2-"*.whl 2>/dev/null | head -n 1) \
         || true
       [ -n "$wheel" ] || { echo "$NAME: no wheel of $1 $2 in $ROOT/wheels (run $0 up)" >&2; exit 1; } ;;
    *) echo "usage: $0 publish-pypi NAME VERSION | WHEEL" >&2; exit 2 ;;
  esac
  [ -f "$wheel" ] || { echo "$NAME: no such wheel: $wheel" >&2; exit 1; }
  load_env
  # a plain copy: its mtime, now, is the upload time that /pypi/<name>/json reports
  cp "$wheel" "$ROOT/pypi-packages/"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  publish-npm) shift; publish_npm "$@" ;;
  publish-pypi) shift; publish_pypi "$@" ;;
  *) echo "usage: $0 up|down|publish-npm DIR|publish-pypi NAME VERSION" >&2; exit 2 ;;
esac
