# Two commands matter: `make run` and `make test` (see README.md).
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release/driftline

.PHONY: sandbox bench-repeats bench-volume-smoke bench-scale bench-scale-smoke fuzz fuzz-smoke capture-real-servers run run-distributed bench-distributed helm-check demo test browser-test python-test python-env mcp-servers infra-up infra-down toolchain fmt lint unit bench build clean

## run: the whole product on embedded defaults (in-process bus and SQLite in ./driftline-data) on 127.0.0.1:8000.
run: build
	$(BIN) serve

## run-distributed: ingest, detect, api, probe and notify as separate processes over Kafka and ClickHouse (after `make infra-up`).
run-distributed: build
	BIN=$(BIN) scripts/run-distributed.sh

## demo: against a running `make run`, send a scripted scenario and show what driftline sees.
##       Against `make run-distributed`: make demo ARGS="--ingest-url http://127.0.0.1:8001"
demo: build
	$(BIN) demo $(ARGS)

build:
	$(CARGO) build --release --locked --bin driftline

## test: formatting, lints, and every test (unit, property, conformance, CLI, end to end, browser).
# Without incremental state: a clean build (CI) gains nothing from it but gigabytes on disk.
test: export CARGO_INCREMENTAL ?= 0
test: toolchain python-env mcp-servers sandbox
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	@mkdir -p target
	deploy/local/kafka.sh up
	deploy/local/clickhouse.sh up
	set -o pipefail; status=0; $(CARGO) test --workspace --locked 2>&1 | tee target/test.log || status=$$?; \
	    [ $$status != 0 ] || $(MAKE) --no-print-directory bench-scale-smoke || status=$$?; \
	    [ $$status != 0 ] || $(MAKE) --no-print-directory bench-volume-smoke || status=$$?; \
	    [ $$status != 0 ] || $(MAKE) --no-print-directory helm-check || status=$$?; \
	    deploy/local/kafka.sh down; deploy/local/clickhouse.sh down; scripts/upstream-registries.sh down; \
	    scripts/mcp-registry.sh down; exit $$status
	$(MAKE) --no-print-directory browser-test
	$(MAKE) --no-print-directory python-test
	$(MAKE) --no-print-directory fuzz-smoke
	@awk '/^test result:/ { p += $$4; f += $$6 } /^# pass / { p += $$3 } /^# fail / { f += $$3 } \
	     /^[0-9]+ (passed|failed).* in [0-9.]+s/ { for (i = 1; i < NF; i++) { if ($$(i+1) ~ /^passed/) p += $$i; if ($$(i+1) ~ /^failed/) f += $$i } } \
	     END { print p " passed, " f " failed" }' target/test.log target/helm-check.log target/browser-test.log target/python-test.log

# Every fuzz target for FUZZ_SECONDS (300) each on an optimised build; a table of executions at the end.
fuzz:
	scripts/fuzz.sh

# Every fuzz target for a few seconds on an unoptimised build (quicker to build), from the seeds only: part
# of `make test`.
fuzz-smoke:
	@rm -rf target/fuzz-smoke/corpus
	set -o pipefail; FUZZ_SECONDS=$${FUZZ_SECONDS:-5} FUZZ_PROFILE=dev FUZZ_OUT=target/fuzz-smoke scripts/fuzz.sh 2>&1 \
	    | tee target/fuzz-smoke.log

# The official `mcp` Python SDK in a cached virtualenv: the capture snippet's tests (examples/python) and the
# MCP servers the Rust end-to-end tests start (tests/mcp) use it.
PYENV = target/python-env
python-env:
	@test -x $(PYENV)/bin/python || python3 -m venv $(PYENV)
	@$(PYENV)/bin/pip install -q --disable-pip-version-check -r examples/python/requirements.txt

python-test: python-env
	$(CARGO) build --locked --bin driftline
	set -o pipefail; DRIFTLINE_BIN=$(TARGET_DIR)/debug/driftline $(PYENV)/bin/python -m pytest -q -p no:cacheprovider examples/python 2>&1 \
	    | tee target/python-test.log

# Reference MCP servers from npm (pinned in tests/mcp/npm/package-lock.json) that the end-to-end tests probe.
mcp-servers:
	cd tests/mcp/npm && npm ci --no-audit --no-fund --loglevel=error

# The Helm chart, alert rules, Grafana dashboard and Dockerfile (tests/helm): helm from the Go module proxy
# (cached), promtool and a Prometheus server from Debian; the scrape test needs `make infra-up` running.
HELM_ENV = target/helm-env
helm-check:
	@scripts/ensure-prometheus.sh
	@test -x $(HELM_ENV)/bin/python || python3 -m venv $(HELM_ENV)
	@$(HELM_ENV)/bin/pip install -q --disable-pip-version-check -r tests/helm/requirements.txt
	$(CARGO) build --locked --bin driftline
	@mkdir -p target
	set -o pipefail; HELM=$$(scripts/ensure-helm.sh) DRIFTLINE_BIN=$(TARGET_DIR)/debug/driftline \
	    $(HELM_ENV)/bin/python -m pytest -q -p no:cacheprovider tests/helm 2>&1 | tee target/helm-check.log

# The dashboard in Debian's headless Chromium, driven by playwright-core from npm (no browser download).
TARGET_DIR = $(shell $(CARGO) metadata --format-version 1 --no-deps 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
browser-test: sandbox
	@scripts/ensure-chromium.sh
	cd tests/browser && npm ci --no-audit --no-fund --loglevel=error
	$(CARGO) build --locked --bin driftline
	@mkdir -p target
	set -o pipefail; cd tests/browser && DRIFTLINE_BIN=$(TARGET_DIR)/debug/driftline SCREENSHOT_DIR=$(CURDIR)/target/screenshots \
	    node --test dashboard.test.mjs 2>&1 | tee $(CURDIR)/target/browser-test.log

# rustfmt and clippy ship with the machine's rustup toolchain; add them only where they are missing. librdkafka
# is built with OpenSSL (Kafka over TLS / SCRAM): its headers come from Debian when missing.
toolchain:
	@$(CARGO) fmt --version >/dev/null 2>&1 || rustup component add rustfmt
	@$(CARGO) clippy --version >/dev/null 2>&1 || rustup component add clippy
	@scripts/ensure-debian-packages.sh pkg-config libssl-dev

# The sandbox the upstream watcher starts a release's server in (upstream/src/sandbox.rs): Debian's
# bubblewrap, and prlimit from util-linux. The tests of tests/upstream.rs need both.
sandbox:
	@scripts/ensure-debian-packages.sh bubblewrap util-linux

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit:
	$(CARGO) test --workspace --locked --lib

## capture-real-servers: install the pinned releases of tests/real/servers.json (npm, PyPI; cached under
## ~/.cache/driftline/real-servers), start each over stdio and save its complete tools/list in tests/real/lists/.
## Not part of `make test`, which reads the saved lists. ARGS="--force filesystem@2026.8.31" to redo one.
capture-real-servers:
	scripts/capture-real-servers.sh $(ARGS)

## infra-up / infra-down: Apache Kafka 4.x (KRaft, 127.0.0.1:19092) for `storage.bus = "kafka"` and the
## ClickHouse HTTP interface over chDB (127.0.0.1:18123) for `storage.store = "clickhouse"`.
infra-up:
	deploy/local/kafka.sh up
	deploy/local/clickhouse.sh up

infra-down:
	deploy/local/kafka.sh down
	deploy/local/clickhouse.sh down

## bench: detector micro-benchmarks (criterion), the service load on `serve` and on the split stages over Kafka
## and ClickHouse (started here and left running: `make infra-down` stops them), and one table of every figure
## next to its reference (also target/bench.json).
bench: infra-up
	@rm -rf target/bench
	$(CARGO) bench --locked -p driftline-detectors --bench detectors
	$(CARGO) bench --locked -p driftline-worker --bench tool_lists
	scripts/shape-instructions.sh
	$(CARGO) bench --locked --bench ingest_load
	DRIFTLINE_BENCH_MODE=split $(CARGO) bench --locked --bench ingest_load
	@python3 scripts/bench-summary.py

## bench-distributed: the same load on split ingest / detect / api over Kafka and ClickHouse, next to a raw
## rdkafka producer; recovery after kill -9 of the detector.
bench-distributed: infra-up
	DRIFTLINE_BENCH_MODE=split $(CARGO) bench --locked --bench ingest_load

## bench-repeats: what telling a call sent again costs on ClickHouse at N (8,000,000) stored identities (the
## per-batch lookup of before next to the range read a detector does now when it takes a stream), then the
## detector's spans/s with 0, 10M and 50M calls stored (VOLUME_STORED) on the embedded path and on Kafka + ClickHouse.
bench-repeats:
	deploy/local/clickhouse.sh up
	deploy/local/kafka.sh up
	scripts/bench-repeat-lookup.sh
	$(CARGO) bench --locked --bench detector_volume

bench-volume-smoke:
	VOLUME_STORED=0,20000 VOLUME_CALLS=3000 VOLUME_BATCH=500 VOLUME_STORES=sqlite,clickhouse,kafka+clickhouse $(CARGO) test --locked --bench detector_volume

## bench-scale: the API's reads of traffic at SCALE_CALLS (50,000,000) calls of one project, from rollups next to
## the raw-call scans they replaced, and the rollups' write overhead, on SQLite and on ClickHouse (the local
## chDB endpoint, or CLICKHOUSE_URL): one table per store, all of them in target/bench-scale.json.
bench-scale:
	deploy/local/clickhouse.sh up
	$(CARGO) bench --locked --bench scale

# The same at 1,000,000 calls on an unoptimised build, as part of `make test` (ClickHouse is up then): it
# checks that every read from rollups answers what the raw calls answer; its timings are not the figures.
bench-scale-smoke:
	SCALE_CALLS=1000000 SCALE_OVERHEAD_CALLS=0 SCALE_REPEATS=3 SCALE_RAW_RUNS=1 $(CARGO) test --locked --bench scale

clean:
	$(CARGO) clean
