#!/usr/bin/env python3
"""Prints the figures `make bench` reports, from criterion's estimates under target/criterion."""
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")


def mean_ns(group, bench, size=None):
    path = root / group / bench / (size or "") / "new" / "estimates.json"
    return json.loads(path.read_text())["mean"]["point_estimate"]


def bytes_of(group, bench, size):
    path = root / group / bench / size / "new" / "benchmark.json"
    return json.loads(path.read_text())["throughput"]["Bytes"]


print("shape fingerprint vs serde_json parsing the same bytes to IgnoredAny (MB/s, higher is better)")
print(f"{'size':>6} {'fingerprint':>12} {'serde_json':>11} {'ratio':>6}")
for size in ["1KiB", "8KiB", "1MiB"]:
    n = bytes_of("shape", "fingerprint", size)
    ours = n / mean_ns("shape", "fingerprint", size) * 1e3
    theirs = n / mean_ns("shape", "serde_json_ignored_any", size) * 1e3
    print(f"{size:>6} {ours:>12.0f} {theirs:>11.0f} {ours / theirs:>6.2f}")
updates = 100 / mean_ns("shape_drift", "observe_window_100") * 1e9
print(f"shape-drift detector: {updates / 1e6:.2f} M updates/s (window 100)")
diffs = 1 / mean_ns("tool_drift", "diff_50_tools") * 1e9
print(f"tool-list diff of two 50-tool lists: {diffs:,.0f} diffs/s")
pair = root / "tool_drift" / "hash_and_diff_tools50"
if pair.exists():
    pairs = 1 / mean_ns("tool_drift", "hash_and_diff_tools50") * 1e9
    unchanged = 1 / mean_ns("tool_drift", "hash_unchanged_tools50") * 1e9
    # LangSight's Python on the same pair, measured on this machine kind (../shared/bench/README.md).
    print(f"tools50 pair, parse + normalise + hash both + diff + report: {pairs:,.0f} pairs/s "
          f"= {pairs / 485:,.0f} x LangSight's 485 pairs per CPU-second; unchanged list: {unchanged:,.0f}/s")
for count in ["1000", "10000"]:
    if (root / "tool_drift" / "hash_and_diff_tools" / count).exists():
        ms = mean_ns("tool_drift", "hash_and_diff_tools", count) / 1e6
        print(f"hash + diff of a {int(count):,}-tool pair: {ms:.1f} ms")
