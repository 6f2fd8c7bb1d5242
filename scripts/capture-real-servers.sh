#!/usr/bin/env bash
# Capture the tools/list of the real MCP servers pinned in tests/real/servers.json
# into tests/real/lists/<id>/<version>.json (see tests/real/README.md).
#
#   scripts/capture-real-servers.sh [--force] [--jobs N] [--timeout S] [ID[@VERSION] ...]
#
# Installs go to ${XDG_CACHE_HOME:-$HOME/.cache}/driftline/real-servers/<id>/<version>/
# and are reused; a version whose list already exists is skipped unless --force.
# Needs python3 (>= 3.10) and, for npm servers, node + npm; uses uv if present.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
for tool in python3 node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "capture-real-servers: $tool is required" >&2; exit 2; }
done
exec python3 "$here/capture_real_servers.py" "$@"
