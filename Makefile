# Two commands matter: `make run` and `make test` (see README.md).
SHELL := /bin/bash
CARGO ?= cargo
BIN := target/release/driftline

.PHONY: run demo test toolchain fmt lint unit bench build clean

## run: the whole product on embedded defaults (in-process bus and SQLite in ./driftline-data) on 127.0.0.1:8000.
run: build
	$(BIN) serve

## demo: against a running `make run`, send a scripted scenario and show what driftline sees.
demo: build
	$(BIN) demo

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

## bench: detector micro-benchmarks (criterion) and the service load generator; prints the figures we report.
bench:
	$(CARGO) bench --locked -p driftline-detectors --bench detectors
	@python3 scripts/bench-summary.py
	$(CARGO) bench --locked --bench ingest_load

clean:
	$(CARGO) clean
