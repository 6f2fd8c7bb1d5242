#!/usr/bin/env bash
# Installs Debian's Chromium for the dashboard tests when it is missing (idempotent; apt keeps its cache).
set -euo pipefail
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
if [ -x "$CHROMIUM" ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
log=$(mktemp)
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium; } >"$log" 2>&1; then
  echo "could not install chromium for the dashboard tests:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
rm -f "$log"
