# Two commands matter: `make run` and `make test` (see README.md).
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release/driftline

.PHONY: run test toolchain fmt lint unit bench build clean

## run: build the binary and show it working on the bundled examples (the service arrives with `driftline serve`).
run: build
	@echo "driftline $$($(BIN) --version | cut -d' ' -f2): the HTTP service (driftline serve) is not built yet;"
	@echo "the offline commands work today. Tool-list drift between two captured tool lists:"
	@echo
	@$(BIN) diff examples/tool-lists/search-v1.json examples/tool-lists/search-v2.json
	@echo
	@echo "Return-shape drift in a stream of tool-call spans (one JSON line per signal):"
	@$(BIN) replay examples/spans/weather.jsonl
	@echo
	@echo "Try: $(BIN) --help"

build:
	$(CARGO) build --release --locked --bin driftline

## test: formatting, lints, and every test (unit, property, conformance, CLI).
test: toolchain
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings
	@mkdir -p target
	set -o pipefail; $(CARGO) test --workspace --locked 2>&1 | tee target/test.log
	@awk '/^test result:/ { p += $$4; f += $$6 } END { print p " passed, " f " failed" }' target/test.log

# rustfmt and clippy ship with the machine's rustup toolchain; add them only where they are missing.
toolchain:
	@$(CARGO) fmt --version >/dev/null 2>&1 || rustup component add rustfmt
	@$(CARGO) clippy --version >/dev/null 2>&1 || rustup component add clippy

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

unit:
	$(CARGO) test --workspace --locked --lib

## bench: criterion benchmarks, then the figures we report (throughput ratio, updates/s, diffs/s).
bench:
	$(CARGO) bench --locked -p driftline-detectors --bench detectors
	@python3 scripts/bench-summary.py

clean:
	$(CARGO) clean
