#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets) for FUZZ_SECONDS each, corpus seeded from the test data, and
# prints one table of executions per target (also target/fuzz/report.json). Installs what it needs: a
# nightly toolchain (minimal profile) and cargo-fuzz, once. FUZZ_PROFILE=dev builds without optimisation
# (the quick smoke in `make test`); FUZZ_OUT=DIR keeps corpora, artifacts and logs there (target/fuzz); a
# crash fails the run and names the saved input.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-300}
PROFILE=${FUZZ_PROFILE:-release}
TARGETS=${FUZZ_TARGETS:-"shape_walk tool_list wire_messages otlp_traces config"}
CARGO_FUZZ_VERSION=0.13.2
OUT=${FUZZ_OUT:-target/fuzz}

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

mkdir -p "$OUT"
seed() { # seed TARGET FILES...: copy test data into the target's corpus (names by content, so idempotent)
    local dir="$OUT/corpus/$1"; shift
    mkdir -p "$dir"
    for file in "$@"; do
        [ -f "$file" ] && cp "$file" "$dir/seed-$(sha1sum "$file" | cut -c1-16)"
    done
    return 0
}
seed shape_walk fuzz/seeds/shape_walk/* ../shared/conformance/*.json examples/tool-lists/*.json tests/golden/*.json
# Each line of the spans file is a span; its return values are shapes to walk.
mkdir -p "$OUT/corpus/shape_walk" "$OUT/corpus/wire_messages"
python3 - "$OUT/corpus" examples/spans/weather.jsonl <<'PY'
import hashlib, json, sys, pathlib
corpus, spans = pathlib.Path(sys.argv[1]), sys.argv[2]
for line in open(spans):
    if not line.strip():
        continue
    for target, text in (("wire_messages", line.strip()),
                         ("shape_walk", json.dumps(json.loads(line).get("return_value")))):
        (corpus / target / ("seed-" + hashlib.sha1(text.encode()).hexdigest()[:16])).write_text(text)
PY
seed tool_list examples/tool-lists/*.json $(find tests/real/lists -name '*.json' | head -40)
seed wire_messages examples/tool-lists/*.json
seed otlp_traces fuzz/seeds/otlp_traces/*
seed config deploy/driftline.example.toml fuzz/seeds/config/*

build_flags=()
[ "$PROFILE" = dev ] && build_flags+=(--dev)
cargo +nightly fuzz build "${build_flags[@]}" --fuzz-dir fuzz --target-dir target/fuzz-build

report="$OUT/report.json"
echo "[" > "$report"
printf '%-16s %14s %10s %8s\n' target executions exec/s corpus
total=0; first=1
for target in $TARGETS; do
    mkdir -p "$OUT/artifacts/$target"
    log="$OUT/$target.log"
    # Short inputs run fast; tool lists and configurations need room for a few entries.
    case $target in tool_list) max_len=16384 ;; otlp_traces) max_len=8192 ;; *) max_len=4096 ;; esac
    status=0
    cargo +nightly fuzz run "${build_flags[@]}" --fuzz-dir fuzz --target-dir target/fuzz-build "$target" \
        "$OUT/corpus/$target" -- -max_total_time="$SECONDS_EACH" -print_final_stats=1 -rss_limit_mb=2048 \
        -max_len=$max_len -artifact_prefix="$OUT/artifacts/$target/" >"$log" 2>&1 || status=$?
    execs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log" | tail -1)
    rate=$(awk '/stat::average_exec_per_sec/ { print $2 }' "$log" | tail -1)
    corpus=$(find "$OUT/corpus/$target" -type f | wc -l)
    printf '%-16s %14s %10s %8s\n' "$target" "${execs:-0}" "${rate:-0}" "$corpus"
    [ $first = 1 ] || echo "," >> "$report"; first=0
    printf '  {"target": "%s", "executions": %s, "exec_per_sec": %s, "corpus": %s, "seconds": %s}' \
        "$target" "${execs:-0}" "${rate:-0}" "$corpus" "$SECONDS_EACH" >> "$report"
    total=$((total + ${execs:-0}))
    if [ $status != 0 ]; then
        echo "fuzz target $target failed (exit $status); the input is in $OUT/artifacts/$target/:" >&2
        grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" | head -20 >&2
        printf '\n]\n' >> "$report"
        exit 1
    fi
done
printf '\n]\n' >> "$report"
printf '%-16s %14s\n' total "$total"
echo "fuzz: $total executions without a crash ($report)"
