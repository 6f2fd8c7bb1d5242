#!/usr/bin/env bash
# Installs the named Debian packages that are not installed yet (idempotent; quiet on success).
set -euo pipefail
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
log=$(mktemp)
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
  echo "could not install ${missing[*]}:" >&2
  tail -n 30 "$log" >&2
  exit 1
fi
rm -f "$log"
