#!/usr/bin/env bash
# Instructions per shape fingerprint and per serde_json parse of the same text to IgnoredAny, counted by
# callgrind (deterministic): each run's count minus that of a run with no iterations (start-up and the
# input's generation), divided by the iterations. Writes target/bench/shape-instructions.json.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || scripts/ensure-debian-packages.sh valgrind
cargo build --release --locked -q -p driftline-detectors --example shape_cost
BIN=target/release/examples/shape_cost
count() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$BIN" "$@" 2>&1 | awk '/refs:/ { gsub(",", "", $NF); print $NF }'; }
mkdir -p target/bench
out="{"
for spec in 1KiB:2000 8KiB:300 1MiB:3; do
  size=${spec%%:*}; n=${spec##*:}
  for which in fingerprint serde; do
    base=$(count "$which" "$size" 0)
    total=$(count "$which" "$size" "$n")
    per=$(( (total - base) / n ))
    out="$out\"$which/$size\": $per, "
    echo "$which $size: $per instructions per value"
  done
done
echo "${out%, }}" > target/bench/shape-instructions.json
