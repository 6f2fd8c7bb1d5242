#!/usr/bin/env bash
# Prints the path of helm, built once from the Go module proxy (pinned) into the cache.
set -euo pipefail
VERSION=v3.22.0
BIN=${DRIFTLINE_CACHE:-$HOME/.cache/driftline}/helm-$VERSION
if [ ! -x "$BIN/helm" ]; then
  log=$(mktemp)
  if ! GOBIN="$BIN" GOFLAGS=-mod=mod go install "helm.sh/helm/v3/cmd/helm@$VERSION" >"$log" 2>&1; then
    echo "could not build helm $VERSION from the Go module proxy:" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  rm -f "$log"
fi
echo "$BIN/helm"
