#!/usr/bin/env bash
# Installs Debian's Chromium for the dashboard tests when it is missing (idempotent; apt keeps its cache).
set -euo pipefail
[ -x "${CHROMIUM:-/usr/bin/chromium}" ] && exit 0
exec "$(dirname "$0")/ensure-debian-packages.sh" chromium
