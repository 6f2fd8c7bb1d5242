#!/usr/bin/env bash
# The official MCP Registry (github.com/modelcontextprotocol/registry, built from the Go module proxy at a
# pinned version) on a free loopback port, on a private PostgreSQL cluster of its own, for the
# upstream-releases tests. Offline: no seeding, no package checks against npm/PyPI/OSV, no GitHub or OIDC
# login; publishing is by the registry's anonymous token (namespace io.modelcontextprotocol.anonymous/*).
# See tests/upstream/README.md.
#   scripts/mcp-registry.sh up            (re)start both, with an empty registry; print the env file
#   scripts/mcp-registry.sh publish FILE  publish a server.json, e.g. tests/upstream/mcp-registry/weather-npm-1.0.0.json
#   scripts/mcp-registry.sh down          stop both
# Everything lives under target/mcp-registry (MCP_REGISTRY_DIR): the registry's binary, built once per
# version into bin/<version>/registry; an initdb'd cluster template, made once per PostgreSQL version,
# which each `up` copies anew into pg/; the logs in run/. Quiet on success; on failure it says what and
# shows the tail of the log. Idempotent.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
ROOT=${MCP_REGISTRY_DIR:-$REPO/target/mcp-registry}
VERSION=${DRIFTLINE_MCP_REGISTRY_VERSION:-v1.8.14}
MODULE=github.com/modelcontextprotocol/registry
BIN="$ROOT/bin/$VERSION/registry"
ENV_FILE="$ROOT/env"
NAME=mcp-registry
STATE="$ROOT/run"
LOG=/dev/null
# shellcheck source=../deploy/local/lib.sh
. "$REPO/deploy/local/lib.sh"

# The registry's server, `go install`ed from the module proxy at $VERSION (GOTOOLCHAIN=auto: a newer Go
# than the machine's, if a later version needs one, comes from the proxy too).
build_registry() {
  [ "$(cat "$ROOT/bin/$VERSION/.installed" 2>/dev/null)" = "$VERSION" ] && [ -x "$BIN" ] && return 0
  command -v go >/dev/null || { echo "$NAME: no go on PATH" >&2; exit 1; }
  local tmp="$ROOT/bin/.building-$VERSION"
  rm -rf "$tmp" "$ROOT/bin/$VERSION"
  mkdir -p "$tmp"
  GOTOOLCHAIN=${GOTOOLCHAIN:-auto} GOBIN="$tmp" \
    run "$ROOT/run/build.log" "go install $MODULE/cmd/registry@$VERSION" \
    go install -trimpath -ldflags "-s -w -X main.Version=${VERSION#v}" "$MODULE/cmd/registry@$VERSION"
  echo "$VERSION" >"$tmp/.installed"
  mv "$tmp" "$ROOT/bin/$VERSION"
}

# PostgreSQL from Debian's packages; its programs are in /usr/lib/postgresql/<major>/bin, not on PATH.
find_postgres() {
  "$REPO/scripts/ensure-debian-packages.sh" postgresql
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$PGBIN" ] || [ ! -x "$PGBIN/postgres" ]; then
    PGBIN=$(dirname "$(command -v postgres || command -v initdb || echo /nonexistent/x)")
  fi
  [ -x "$PGBIN/postgres" ] && [ -x "$PGBIN/initdb" ] || { echo "$NAME: no PostgreSQL server (initdb, postgres) found" >&2; exit 1; }
}

# PostgreSQL will not run as root: as root, the cluster belongs to the postgres user (made by Debian's
# package) and its programs run as that user through setpriv, which execs (so the pid is postgres's own).
# That user must reach the cluster's folder; where it cannot (a clone under a private home), the cluster
# goes to a folder of its own under /tmp instead.
AS_PG=()
as_pg() { "${AS_PG[@]}" "$@"; }

pg_home() {
  PGHOME=$ROOT
  if [ "$(id -u)" = 0 ]; then
    PGUSER_OS=postgres
    id "$PGUSER_OS" >/dev/null 2>&1 || { echo "$NAME: running as root, and there is no postgres user to run PostgreSQL as" >&2; exit 1; }
    AS_PG=(setpriv --reuid="$PGUSER_OS" --regid="$PGUSER_OS" --init-groups --)
    mkdir -p "$ROOT"
    if ! as_pg test -x "$ROOT"; then
      PGHOME=/tmp/driftline-mcp-registry-$(echo "$ROOT" | sha256sum | cut -c1-12)
      mkdir -p "$PGHOME"
      chmod 755 "$PGHOME"
    fi
  fi
  PGDATA_DIR="$PGHOME/pg"
}

# An initdb'd cluster with the database "mcp-registry" (superuser mcpregistry, trust on loopback), made
# once per PostgreSQL version; each `up` starts from a copy.
pg_template() {
  local template="$PGHOME/pg-template" key
  key=$("$PGBIN/postgres" --version)-${PGUSER_OS:-$(id -un)}
  [ "$(cat "$PGHOME/.pg-template" 2>/dev/null)" = "$key" ] && [ -f "$template/PG_VERSION" ] && return 0
  rm -rf "$template" "$PGHOME/.pg-template"
  mkdir -p "$template"
  if [ "$(id -u)" = 0 ]; then chown "$PGUSER_OS:" "$template"; fi
  chmod 700 "$template"
  run "$ROOT/run/initdb.log" "initdb of the PostgreSQL cluster template ($template)" \
    as_pg "$PGBIN/initdb" -D "$template" -U mcpregistry --auth=trust -E UTF8 --no-locale --no-sync
  run "$ROOT/run/initdb.log" "creating the database mcp-registry in the cluster template" \
    as_pg "$PGBIN/postgres" --single -D "$template" -c unix_socket_directories= postgres \
    <<<'CREATE DATABASE "mcp-registry";'
  echo "$key" >"$PGHOME/.pg-template"
}

# pg_isready is in the client package, which the server's depends on
pg_ready() {
  "$PGBIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -d mcp-registry -U mcpregistry
}
registry_ready() { answers "http://127.0.0.1:$REGISTRY_PORT/v0.1/health"; }

# Every MCP_REGISTRY_* setting of the registry is given here; none comes from the caller's environment.
registry_environment() {
  local var
  for var in $(compgen -e | grep '^MCP_REGISTRY_' || true); do unset "$var"; done
  export MCP_REGISTRY_SERVER_ADDRESS="127.0.0.1:$REGISTRY_PORT"
  export MCP_REGISTRY_DATABASE_URL="postgres://mcpregistry@127.0.0.1:$PG_PORT/mcp-registry?sslmode=disable"
  export MCP_REGISTRY_DATABASE_MAX_CONNECTIONS=10 MCP_REGISTRY_DATABASE_MIN_CONNECTIONS=1
  export MCP_REGISTRY_VERSION="${VERSION#v}"
  # no seed import (the default in docker-compose.yml fetches from the public registry)
  export MCP_REGISTRY_SEED_FROM=
  # no npm/PyPI/NuGet/OCI ownership checks on publish (and so no OSV malware check either)
  export MCP_REGISTRY_ENABLE_REGISTRY_VALIDATION=false
  export MCP_REGISTRY_MALWARE_CHECK_MODE=off MCP_REGISTRY_OSV_API_URL=http://127.0.0.1:9
  export MCP_REGISTRY_MALWARE_SWEEP_MISSING_PACKAGES=false
  export MCP_REGISTRY_MALWARE_SWEEP_REGISTRY_URL="http://127.0.0.1:$REGISTRY_PORT"
  # POST /v0.1/auth/none gives a 5-minute token for io.modelcontextprotocol.anonymous/*
  export MCP_REGISTRY_ENABLE_ANONYMOUS_AUTH=true
  # the key the registry signs its tokens with: a 32-byte Ed25519 seed, hex; new on each up
  MCP_REGISTRY_JWT_PRIVATE_KEY=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
  export MCP_REGISTRY_JWT_PRIVATE_KEY
  # no GitHub OAuth, GitHub Actions OIDC or admin OIDC login
  export MCP_REGISTRY_GITHUB_CLIENT_ID= MCP_REGISTRY_GITHUB_CLIENT_SECRET= MCP_REGISTRY_GITHUB_OIDC_AUDIENCE=
  export MCP_REGISTRY_OIDC_ENABLED=false
  export MCP_REGISTRY_PREPARED_LISTING_JSON=false
}

up() {
  mkdir -p "$ROOT/run"
  down
  build_registry
  find_postgres
  pg_home
  pg_template

  rm -rf "$PGDATA_DIR"
  cp -a "$PGHOME/pg-template" "$PGDATA_DIR"
  echo "$PGDATA_DIR" >"$ROOT/run/pgdata"

  PG_PORT=$(free_port)
  NAME=postgres STATE="$ROOT/run/postgres" LOG="$ROOT/run/postgres/log"
  mkdir -p "$STATE"
  : >"$LOG"
  # TCP on loopback only, no Unix socket (whose path may be too long); durability off: a throwaway cluster
  start_and_wait pg_ready "${AS_PG[@]}" "$PGBIN/postgres" -D "$PGDATA_DIR" -p "$PG_PORT" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c max_connections=40 \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off

  REGISTRY_PORT=$(free_port)
  NAME=registry STATE="$ROOT/run/registry" LOG="$ROOT/run/registry/log"
  mkdir -p "$STATE"
  : >"$LOG"
  (
    registry_environment
    start_and_wait registry_ready "$BIN"
  )
  NAME=mcp-registry

  echo "MCP_REGISTRY=http://127.0.0.1:$REGISTRY_PORT/" >"$ENV_FILE"
  cat "$ENV_FILE"
}

# PostgreSQL's immediate shutdown (SIGQUIT): no checkpoint, as the next `up` throws the cluster away; it
# takes the cluster's other processes with it. SIGKILL after 30 s.
stop_postgres() {
  local pid_file="$ROOT/run/postgres/pid" pid
  [ -f "$pid_file" ] || return 0
  pid=$(cat "$pid_file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -QUIT "$pid"
    for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pid_file"
}

down() {
  # both at once: the registry takes a second or so to go
  NAME=registry STATE="$ROOT/run/registry" stop &
  stop_postgres &
  wait
  rm -f "$ENV_FILE"
}

# publish FILE: an anonymous token from POST /v0.1/auth/none, then POST /v0.1/publish with the file.
publish() {
  [ $# -eq 1 ] && [ -f "$1" ] || { echo "usage: $0 publish SERVER_JSON_FILE" >&2; exit 2; }
  load_env
  python3 - "$MCP_REGISTRY" "$1" <<'PY'
import json, sys, urllib.error, urllib.request

base, path = sys.argv[1], sys.argv[2]

def post(url, body, token=None):
    request = urllib.request.Request(base + url, data=body, method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
    if token:
        request.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        sys.exit(f"mcp-registry: POST {base}{url} ({path}): HTTP {e.code}: {e.read().decode(errors='replace')}")
    except OSError as e:
        sys.exit(f"mcp-registry: POST {base}{url} ({path}): {e}")

with open(path, "rb") as f:
    body = f.read()
token = post("v0.1/auth/none", b"")["registry_token"]
post("v0.1/publish", body, token)
PY
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  publish) shift; publish "$@" ;;
  *) echo "usage: $0 up|down|publish FILE" >&2; exit 2 ;;
esac
