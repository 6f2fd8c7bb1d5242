#!/usr/bin/env bash
# The split deployment on one machine: `driftline ingest` (127.0.0.1:8001), `driftline detect` (metrics on
# 127.0.0.1:8002) and `driftline api` (127.0.0.1:8000, dashboard and queries) over the local Kafka and
# ClickHouse of `make infra-up`. Ctrl-C stops all three.
#   make demo ARGS="--ingest-url http://127.0.0.1:8001"   sends the demo scenario to it
set -euo pipefail
BIN=${BIN:-target/release/driftline}
export DRIFTLINE__STORAGE__BUS=kafka DRIFTLINE__STORAGE__STORE=clickhouse
"$BIN" topics create >/dev/null
"$BIN" migrate
pids=()
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
"$BIN" ingest --bind 127.0.0.1:8001 & pids+=($!)
"$BIN" detect --bind 127.0.0.1:8002 & pids+=($!)
"$BIN" api --bind 127.0.0.1:8000 & pids+=($!)
wait -n
