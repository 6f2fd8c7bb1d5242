#!/usr/bin/env bash
# Installs Debian's prometheus package (the Prometheus server and promtool) when missing (idempotent).
set -euo pipefail
if command -v promtool >/dev/null && command -v prometheus >/dev/null; then
  exit 0
fi
"$(dirname "$0")/ensure-debian-packages.sh" prometheus
# The package starts a Prometheus service on :9090 where services run; the tests run their own.
if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
  $SUDO systemctl stop prometheus || true
fi
