# Shared by the deploy/local service scripts. The caller sets NAME (for messages), STATE (its directory:
# pid file) and LOG (the service's log, whose tail is shown on failure).

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
