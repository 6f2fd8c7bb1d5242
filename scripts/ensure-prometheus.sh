#!/usr/bin/env bash
# Installs Debian's prometheus package (the Prometheus server and promtool) when missing (idempotent).
set -euo pipefail
if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
log=$(mktemp)
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus; } >"$log" 2>&1; then
  echo "could not install prometheus (promtool) for the chart checks:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
rm -f "$log"
# The package starts a Prometheus service on :9090 where services run; the tests run their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  $SUDO systemctl stop prometheus || true
fi
