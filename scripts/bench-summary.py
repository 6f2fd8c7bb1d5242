#!/usr/bin/env python3
"""`make bench`'s one table: every figure next to its reference, measured in the same run where the reference
is code (serde_json, a raw rdkafka producer, driftline's own ingest), from criterion's estimates under
target/criterion and the service runs' figures under target/bench (benches/ingest_load.rs). Also written as
JSON to target/bench.json. Figures a run did not produce (no Kafka for the split stages, say) are left out."""
import json
import pathlib
import sys

target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target")
criterion = target / "criterion"
# LangSight's Python on the same tools50 pair, measured on this machine kind (../shared/bench/README.md):
# a peer's figure, not re-run here (its code is not part of this repository).
LANGSIGHT_PAIRS_PER_CPU_SECOND = 485

rows = []  # (figure, driftline, reference, ratio)
figures = {}


def mean_ns(*path):
    file = criterion.joinpath(*path, "new", "estimates.json")
    if not file.exists():
        return None
    return json.loads(file.read_text())["mean"]["point_estimate"]


def bytes_of(*path):
    file = criterion.joinpath(*path, "new", "benchmark.json")
    return json.loads(file.read_text())["throughput"]["Bytes"]


def service(mode):
    file = target / "bench" / f"service-{mode}.json"
    return json.loads(file.read_text()) if file.exists() else None


def add(key, figure, ours, reference="", ratio=None, **extra):
    rows.append((figure, ours, reference, "" if ratio is None else f"{ratio:.2f}"))
    figures[key] = {"figure": figure, "driftline": ours, "reference": reference, "ratio": ratio, **extra}


for size in ["1KiB", "8KiB", "1MiB"]:
    ours_ns, serde_ns = mean_ns("shape", "fingerprint", size), mean_ns("shape", "serde_json_ignored_any", size)
    if ours_ns and serde_ns:
        n = bytes_of("shape", "fingerprint", size)
        ours, theirs = n / ours_ns * 1e3, n / serde_ns * 1e3
        add(f"shape_{size}", f"shape fingerprint, {size}", f"{ours:,.0f} MB/s",
            f"serde_json to IgnoredAny: {theirs:,.0f} MB/s", ours / theirs, mb_per_s=ours, reference_mb_per_s=theirs)

counts_file = target / "bench" / "shape-instructions.json"
if counts_file.exists():
    counts = json.loads(counts_file.read_text())
    for size in ["1KiB", "8KiB", "1MiB"]:
        ours, theirs = counts.get(f"fingerprint/{size}"), counts.get(f"serde/{size}")
        if ours and theirs:
            # Higher is better, as for the timings: serde's instructions per ours.
            add(f"shape_instructions_{size}", f"shape fingerprint, {size}: instructions (callgrind)",
                f"{ours:,} per value", f"serde_json to IgnoredAny: {theirs:,}", theirs / ours,
                instructions=ours, reference_instructions=theirs)

updates_ns = mean_ns("shape_drift", "observe_window_100")
if updates_ns:
    add("shape_drift_updates", "shape-drift detector updates (window 100)", f"{100 / updates_ns * 1e3:,.1f} M/s",
        updates_per_s=100 / updates_ns * 1e9)

for key, bench, label in [
    ("tools50_pair", "hash_and_diff_tools50", "tools50 pair: parse both, index (normalise, hash) both, diff, report"),
    ("tools50_parsed_pair", "hash_and_diff_parsed_tools50", "tools50 pair from parsed lists: index both, diff, report"),
    ("tools50_changed_record", ("tool_lists", "record_changed_tools50"),
     "detector: a changed tools50 record against its baseline (read, parse, index, hash, diff, event)"),
    ("tools50_changed_parsed", "observe_changed_parsed_tools50",
     "detector: a changed tools50 list, parsed, against its indexed baseline"),
]:
    ns = mean_ns(*bench) if isinstance(bench, tuple) else mean_ns("tool_drift", bench)
    if ns:
        pairs = 1e9 / ns
        add(key, label, f"{pairs:,.0f} pairs/s ({ns / 1e3:,.1f} µs)",
            f"LangSight: {LANGSIGHT_PAIRS_PER_CPU_SECOND} pairs per CPU-second (its figure)",
            pairs / LANGSIGHT_PAIRS_PER_CPU_SECOND, pairs_per_s=pairs)
# What reading the pair's text costs before any tool-list work: serde_json parsing both texts, and only
# validating them (the least any reader of the text does): the ceiling of any figure from text.
for key, bench, label in [
    ("tools50_parse_reference", "serde_json_parse_tools50_pair", "tools50 pair: serde_json parsing both texts alone"),
    ("tools50_validate_reference", "serde_json_ignored_any_tools50_pair",
     "tools50 pair: serde_json validating both texts alone (IgnoredAny)"),
]:
    ns = mean_ns("tool_drift", bench)
    if ns:
        add(key, label, f"{1e9 / ns:,.0f}/s ({ns / 1e3:,.1f} µs)", "the ceiling of any pair figure from text",
            per_s=1e9 / ns)
unchanged = mean_ns("tool_drift", "hash_unchanged_tools50")
if unchanged:
    add("tools50_unchanged", "tools50 pair unchanged: parse both, index both, compare hashes",
        f"{1e9 / unchanged:,.0f}/s ({unchanged / 1e3:,.1f} µs)", per_s=1e9 / unchanged)
tokens, indexed = mean_ns("context_cost", "tokens_largest_real_list"), mean_ns("context_cost", "index_largest_real_list")
if tokens and indexed:
    add("context_cost_largest", "context cost: o200k_base tokens of the largest real list counted whole (firecrawl 3.26.0, 20,807 tokens)",
        f"{tokens / 1e6:,.2f} ms", f"the detector reading and indexing that list: {indexed / 1e6:,.2f} ms",
        tokens / indexed, ms=tokens / 1e6)
# The tokenizer against the reference one on the same texts (the same counts), and on a hostile run.
for key, ours, reference, label in [
    ("tokenizer_largest", "bpe_openai_largest_real_list", "tiktoken_largest_real_list",
     "tokenizer: bpe-openai on the largest real list's tool texts"),
    ("tokenizer_hostile_run", "bpe_openai_1MB_run", "tiktoken_1MB_run", "tokenizer: bpe-openai on 1 MiB of one letter"),
]:
    mine, theirs = mean_ns("context_cost", ours), mean_ns("context_cost", reference)
    if mine and theirs:
        add(key, label, f"{mine / 1e6:,.2f} ms", f"tiktoken-rs: {theirs / 1e6:,.2f} ms", mine / theirs, ms=mine / 1e6)
observe = mean_ns("tool_drift", "observe_unchanged_tools50")
if observe:
    add("tools50_observe_unchanged", "detector: a probe's unchanged tools50 list (parse, observe)",
        f"{1e9 / observe:,.0f}/s ({observe / 1e3:,.1f} µs)", per_s=1e9 / observe)
record = mean_ns("tool_lists", "record_unchanged_tools50")
if record:
    add("tools50_record_unchanged", "detector: a probe's unchanged tools50 record (its text seen before: read, observe)",
        f"{1e9 / record:,.0f}/s ({record / 1e3:,.1f} µs)",
        f"parsing it again: {1e9 / observe:,.0f}/s" if observe else "", (observe / record) if observe else None,
        per_s=1e9 / record)
small, large = mean_ns("tool_drift", "hash_and_diff_tools", "1000"), mean_ns("tool_drift", "hash_and_diff_tools", "10000")
if small and large:
    add("tools_1000_pair", "1,000-tool pair (parsed): index both, diff", f"{small / 1e6:,.1f} ms", ms=small / 1e6)
    add("tools_10000_pair", "10,000-tool pair (parsed): index both, diff", f"{large / 1e6:,.1f} ms",
        "the 1,000-tool pair x 10 (linear)", large / small / 10, ms=large / 1e6)
crowded = mean_ns("tool_drift", "hash_and_diff_tools_crowded", "10000")
if crowded and large:
    add("tools_10000_crowded", "10,000-tool pair, 40 more parameters each, all retyped in each changed tool "
        "(more changes of a kind than a tool's own listing holds: diffed again)", f"{crowded / 1e6:,.1f} ms",
        "the 10,000-tool pair", crowded / large, ms=crowded / 1e6)

embedded = service("embedded")
if embedded:
    ingest = embedded["ingest_spans_per_second"]
    add("embedded_ingest", "serve: ingest, 4 clients x 100-span requests, acknowledged", f"{ingest:,.0f} spans/s",
        spans_per_s=ingest)
    detector = embedded["detector_spans_per_second"]
    add("embedded_detector", f"serve: detector on a backlog of {embedded['detector_backlog']:,} spans",
        f"{detector:,.0f} spans/s", f"serve's ingest: {ingest:,.0f} spans/s", detector / ingest, spans_per_s=detector)
    latency = embedded["latency"]
    add("embedded_latency", f"serve: span -> queryable at {latency['background_spans_per_second']:,.0f} spans/s",
        f"p50 {latency['p50_ms']:.1f} ms, p99 {latency['p99_ms']:.1f} ms", "p99 target 1,000 ms",
        latency["p99_ms"] / 1000, **latency)
    idle = embedded["idle_connections"]
    add("idle_connections", f"{idle['connections']:,} idle keep-alive connections, fresh server",
        f"+{idle['grown_mb']:.1f} MB resident", "target < 50 MB", idle["grown_mb"] / 50, **idle)
    idle = embedded.get("idle_connections_after_load")
    if idle:
        add("idle_connections_after_load", f"{idle['connections']:,} idle keep-alive connections, after the load",
            f"+{idle['grown_mb']:.1f} MB resident", "target < 50 MB", idle["grown_mb"] / 50, **idle)
    metrics = embedded["metrics"]
    add("metrics_size", f"/metrics series after 500, then 1,000 requests with unknown methods and paths",
        f"{metrics['series_after_first']:,} -> {metrics['series_after_second']:,} series",
        f"before them: {metrics['series_before']:,} ({metrics['bytes_before']:,} bytes)",
        metrics["series_after_second"] / metrics["series_after_first"], **metrics)

split = service("split")
if split:
    raw, ingest = split["raw_producer_spans_per_second"], split["ingest_spans_per_second"]
    add("split_ingest", "ingest -> Kafka, 4 clients x 100-span requests", f"{ingest:,.0f} spans/s",
        f"raw rdkafka producer: {raw:,.0f} spans/s", ingest / raw, spans_per_s=ingest)
    detector = split["detector_spans_per_second"]
    add("split_detector", f"one detector, Kafka -> ClickHouse, on a backlog of {split['detector_backlog']:,} spans",
        f"{detector:,.0f} spans/s", f"ingest -> Kafka: {ingest:,.0f} spans/s", detector / ingest, spans_per_s=detector)
    add("split_restart", "detector kill -9 -> restarted (process start to listening)", f"{split['restart_seconds']:.2f} s",
        f"then {split['after_kill_spans_per_second']:,.0f} spans/s over the rest of the backlog", seconds=split["restart_seconds"])
    latency = split["latency"]
    add("split_latency", f"split stages: span -> queryable at {latency['background_spans_per_second']:,.0f} spans/s",
        f"p50 {latency['p50_ms']:.1f} ms, p99 {latency['p99_ms']:.1f} ms", "p99 target 1,000 ms",
        latency["p99_ms"] / 1000, **latency)

if not rows:
    sys.exit("no benchmark results under " + str(target))
widths = [max(len(str(row[i])) for row in rows + [("figure", "driftline", "reference", "ratio")]) for i in range(4)]
line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
print(line(("figure", "driftline", "reference (same run unless marked)", "ratio")))
print(line(["-" * w for w in widths]))
for row in rows:
    print(line(row))
(target / "bench.json").write_text(json.dumps(figures, indent=2) + "\n")
print(f"\n(also {target / 'bench.json'})")
