# Shared by the deploy/local service scripts and the test registries (scripts/upstream-registries.sh,
# scripts/mcp-registry.sh). The caller sets NAME (for messages), STATE (its directory: pid file) and LOG
# (the service's log, whose tail is shown on failure); load_env also ENV_FILE.

fail() {
  echo "$NAME: $*" >&2
  [ -f "$LOG" ] && tail -n 40 "$LOG" >&2
  exit 1
}

# start_and_wait CHECK COMMAND...: runs COMMAND in the background (output to $LOG) and waits up to 60 s
# until CHECK succeeds; fails loudly when the process exits first or the time is up.
start_and_wait() {
  local check=$1
  shift
  nohup "$@" >>"$LOG" 2>&1 &
  echo $! >"$STATE/pid"
  for _ in $(seq 1 120); do
    if "$check"; then return 0; fi
    kill -0 "$(cat "$STATE/pid")" 2>/dev/null || fail "the process exited"
    sleep 0.5
  done
  fail "not ready within 60 s"
}

# stop: SIGTERM, up to 30 s to exit, then SIGKILL.
stop() {
  [ -f "$STATE/pid" ] || return 0
  local pid; pid=$(cat "$STATE/pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$STATE/pid"
}

# run LOGFILE WHAT COMMAND...: runs COMMAND with its output in LOGFILE; on failure shows the tail and stops.
run() {
  local log=$1 what=$2
  shift 2
  if ! "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2
    echo "$NAME: $what failed (log: $log)" >&2
    exit 1
  fi
}

# free_port: a TCP port free on loopback now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# answers URL: whether URL answers a GET with a success within 2 s.
answers() {
  python3 - "$1" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=2).read()
PY
}

# load_env: reads ENV_FILE, which `up` wrote; says to run `up` first when there is none.
load_env() {
  [ -f "$ENV_FILE" ] || { echo "$NAME: not up (no $ENV_FILE): run $0 up first" >&2; exit 1; }
  # shellcheck disable=SC1090
  . "$ENV_FILE"
}
