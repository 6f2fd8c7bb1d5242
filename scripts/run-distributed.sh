#!/usr/bin/env bash
# The split deployment on one machine: `driftline ingest` (127.0.0.1:8001), `driftline detect` (metrics on
# 127.0.0.1:8002), `driftline api` (127.0.0.1:8000, dashboard and queries), `driftline probe` (metrics on
# 127.0.0.1:8003) and `driftline notify` (metrics on 127.0.0.1:8004) over the local Kafka and ClickHouse of
# `make infra-up`. probe probes the servers of ./driftline.toml's [[probe.servers]] and notify sends to its
# [[notify.webhooks]]; without them they idle. Ctrl-C stops all five.
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
# One each: a second prober would probe every server twice, a second notifier send every notification twice.
"$BIN" probe --bind 127.0.0.1:8003 & pids+=($!)
"$BIN" notify --bind 127.0.0.1:8004 & pids+=($!)
wait -n
