#!/usr/bin/env bash
# Apache Kafka 4.x, single-node KRaft on 127.0.0.1:19092, for local runs and tests.
#   deploy/local/kafka.sh up      fetch the jars once (Maven Central, cached), format, start, wait until ready
#   deploy/local/kafka.sh down    stop it
#   deploy/local/kafka.sh classpath   fetch the jars once and print their classpath (Kafka's own Java clients)
# Quiet on success; on failure it prints the tail of the broker log. Idempotent.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$HERE/kafka/pom.xml")
CACHE=${DRIFTLINE_CACHE:-$HOME/.cache/driftline}/kafka-$VERSION
STATE=${DRIFTLINE_INFRA_DIR:-$REPO/target/infra}/kafka
PORT=${KAFKA_PORT:-19092}
CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-19093}
LOG="$STATE/broker.log"
NAME=kafka
# shellcheck source=lib.sh
. "$HERE/lib.sh"

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

fetch() {
  [ -f "$CACHE/.complete" ] && return 0
  mkdir -p "$CACHE/libs"
  local log; log=$(mktemp)
  if ! mvn -B -q -f "$HERE/kafka/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$CACHE/libs" >"$log" 2>&1; then
    tail -n 40 "$log" >&2; rm -f "$log"; fail "could not fetch Apache Kafka $VERSION from Maven Central"
  fi
  rm -f "$log"
  touch "$CACHE/.complete"
}

up() {
  if listening "$PORT"; then return 0; fi
  fetch
  mkdir -p "$STATE/data"
  cat >"$STATE/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$STATE/data
num.partitions=4
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
PROPS
  local classpath="$CACHE/libs/*"
  local java=(java -Xms256m -Xmx512m -Dlog4j2.configurationFile="$HERE/kafka/log4j2.properties" -cp "$classpath")
  if [ ! -f "$STATE/data/meta.properties" ]; then
    local id; id=$("${java[@]}" kafka.tools.StorageTool random-uuid 2>>"$LOG") || fail "cannot make a cluster id"
    "${java[@]}" kafka.tools.StorageTool format --standalone -t "$id" -c "$STATE/server.properties" >>"$LOG" 2>&1 \
      || fail "cannot format the storage"
  fi
  start_and_wait broker_listens "${java[@]}" kafka.Kafka "$STATE/server.properties"
}

broker_listens() { listening "$PORT"; }

down() { stop; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  classpath) fetch; echo "$CACHE/libs/*" ;;
  *) echo "usage: $0 up|down|classpath" >&2; exit 2 ;;
esac
