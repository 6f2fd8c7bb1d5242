#!/bin/bash
# `make bench-repeats`: what telling a call sent again costs on ClickHouse at N stored call identities
# (default 8,000,000; `N=2000000 make bench-repeats`), in a scratch database of the local ClickHouse:
# - the per-batch lookup driftline did before (20,000 new identities against `call_identities`, sorted by
#   identity, FINAL): its time grows with what is stored;
# - what a detector reads now, once, when it takes a stream: that stream's identities of the last 24 hours
#   from `call_identities_by_stream` (sorted by stream and time); per batch it reads nothing.
set -euo pipefail
CH=${CLICKHOUSE_URL:-http://127.0.0.1:18123}
q() { printf "%s" "$1" > /tmp/chq.sql; curl -sS --fail-with-body "$CH/" --data-binary @/tmp/chq.sql; }
t() { local s=$(date +%s.%N); q "$1" > /dev/null; local e=$(date +%s.%N); python3 -c "print(f'{$e-$s:.3f}')"; }
N=${N:-8000000}
q "DROP DATABASE IF EXISTS repeatbench"
q "CREATE DATABASE repeatbench"
q "CREATE TABLE repeatbench.old (identity String, partition UInt32, offset UInt64, ingested_at DateTime64(3,'UTC')) ENGINE=ReplacingMergeTree ORDER BY identity"
q "CREATE TABLE repeatbench.new (partition UInt32, ingested_at DateTime64(3,'UTC'), identity String, offset UInt64) ENGINE=ReplacingMergeTree ORDER BY (partition, ingested_at, identity)"
q "INSERT INTO repeatbench.old SELECT lower(hex(MD5(toString(number)))), number % 8, number, now64(3) - toIntervalSecond(number % 86400) FROM numbers($N)"
q "INSERT INTO repeatbench.new SELECT number % 8, now64(3) - toIntervalSecond(number % 86400), lower(hex(MD5(toString(number)))), number FROM numbers($N)"
q "OPTIMIZE TABLE repeatbench.old FINAL"; q "OPTIMIZE TABLE repeatbench.new FINAL"
# A batch of 20,000 identities, new calls (not stored).
IDS=$(python3 -c "import hashlib; print(','.join(\"'%s'\" % hashlib.md5(('x%d' % i).encode()).hexdigest() for i in range(20000)))")
for run in 1 2 3; do
  echo "old per-batch lookup of 20,000 identities at $N stored: $(t "SELECT identity, partition, offset FROM repeatbench.old FINAL WHERE identity IN ($IDS) AND ingested_at >= now64(3) - INTERVAL 24 HOUR SETTINGS max_query_size=10000000") s"
done
for run in 1 2 3; do
  echo "new takeover load of one stream (of 8) at $N stored: $(t "SELECT identity, partition, offset, ingested_at FROM repeatbench.new WHERE partition IN [3] AND ingested_at >= now64(3) - INTERVAL 24 HOUR ORDER BY partition, ingested_at DESC LIMIT 4194304 BY partition FORMAT Null") s"
done
echo "call_identities_by_stream on disk (compressed, rows):"
q "SELECT formatReadableSize(sum(data_compressed_bytes)), sum(rows) FROM system.parts WHERE database='repeatbench' AND table='new' AND active"
q "DROP DATABASE repeatbench"
