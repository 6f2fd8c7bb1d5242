#!/usr/bin/env bash
# The ClickHouse HTTP interface on 127.0.0.1:18123, served from chDB (the ClickHouse engine in-process; no
# ClickHouse server package installs on these machines — DESIGN.md §11).
#   deploy/local/clickhouse.sh up      make the Python environment once (PyPI, cached), start, wait for /ping
#   deploy/local/clickhouse.sh down    stop it
# Quiet on success; on failure it prints the tail of the server log. Idempotent.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
REQUIREMENTS="$HERE/clickhouse/requirements.txt"
CACHE=${DRIFTLINE_CACHE:-$HOME/.cache/driftline}
VENV="$CACHE/chdb-$(sha256sum "$REQUIREMENTS" | cut -c1-12)"
STATE=${DRIFTLINE_INFRA_DIR:-$REPO/target/infra}/clickhouse
PORT=${CLICKHOUSE_PORT:-18123}
LOG="$STATE/server.log"
NAME=clickhouse
# shellcheck source=lib.sh
. "$HERE/lib.sh"

answers() {
  python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" \
    "http://127.0.0.1:$PORT/ping" >/dev/null 2>&1
}

environment() {
  [ -f "$VENV/.complete" ] && return 0
  rm -rf "$VENV"
  local log; log=$(mktemp)
  if ! { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q --disable-pip-version-check -r "$REQUIREMENTS"; } \
      >"$log" 2>&1; then
    tail -n 40 "$log" >&2; rm -f "$log"; fail "could not install chDB from PyPI"
  fi
  rm -f "$log"
  touch "$VENV/.complete"
}

up() {
  if answers; then return 0; fi
  environment
  mkdir -p "$STATE/data"
  start_and_wait answers "$VENV/bin/python" "$HERE/clickhouse/chdb_http.py" --port "$PORT" --path "$STATE/data"
}

down() { stop; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
