#!/usr/bin/env python3
"""Capture the `tools/list` of real MCP servers at pinned releases.

Reads tests/real/servers.json, installs every pinned version of every server
into a cache (${XDG_CACHE_HOME:-$HOME/.cache}/driftline/real-servers/<id>/<version>/),
starts it as a child process over stdio, speaks plain newline-delimited
JSON-RPC to it (initialize, notifications/initialized, tools/list following
nextCursor) and writes tests/real/lists/<id>/<version>.json: a JSON array of
the tool objects exactly as the server returned them (key order kept,
2-space indent).

Usually run through scripts/capture-real-servers.sh. Only the standard
library is used; npm (for npm servers) and python3 -m venv + pip, or uv if
it is on PATH (for PyPI servers), do the installs.

Usage: capture_real_servers.py [--force] [--jobs N] [--timeout S] [ID[@VERSION] ...]
"""

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "tests" / "real" / "servers.json"
OUT_DIR = REPO / "tests" / "real" / "lists"
PROTOCOL_VERSIONS = ["2025-06-18", "2025-11-25"]
CLIENT_INFO = {"name": "driftline-capture", "version": "0.1.0"}

_print_lock = threading.Lock()


def log(*parts):
    with _print_lock:
        print(*parts, flush=True)


def cache_root():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "driftline" / "real-servers"


def run(cmd, env=None, cwd=None, logfile=None):
    with open(logfile, "ab") if logfile else open(os.devnull, "wb") as lf:
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=lf, stderr=lf, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"command failed ({proc.returncode}): {' '.join(map(str, cmd))}; see {logfile}")


# --------------------------------------------------------------------------- install

def install(server, version, vopts, vdir):
    """Install server@version into vdir (idempotent); return the argv prefix to start it."""
    marker = vdir / ".installed"
    env = dict(os.environ)
    env.update(server.get("install_env", {}))
    logfile = vdir / "install.log"
    reg = server["registry"]
    pkg = server["package"]
    overrides = vopts.get("npm_overrides", server.get("npm_overrides", {}))
    pip_extra = vopts.get("pip_extra", server.get("pip_extra", []))
    stamp = json.dumps({"package": pkg, "version": version, "npm_overrides": overrides,
                        "pip_extra": pip_extra}, sort_keys=True) + "\n"
    if vdir.exists() and (not marker.exists() or marker.read_text() != stamp):
        shutil.rmtree(vdir)  # a half-done install, or one made with other settings
    vdir.mkdir(parents=True, exist_ok=True)
    if not marker.exists():
        log(f"[{server['id']}@{version}] installing {pkg}@{version} from {reg}")
        if reg == "npm":
            # "overrides" pins a transitive dependency to what it resolved to when the
            # release was published (e.g. zod 3 for servers that import zod without
            # declaring it; today npm hoists zod 4 and their schemas come out empty).
            root = {"name": "driftline-capture", "private": True}
            if overrides:
                root["overrides"] = overrides
            (vdir / "package.json").write_text(json.dumps(root, indent=2) + "\n")
            cmd = ["npm", "install", "--prefix", str(vdir), "--no-audit", "--no-fund",
                   "--loglevel=error", f"{pkg}@{version}"]
            if server.get("npm_ignore_scripts"):
                cmd.insert(2, "--ignore-scripts")
            run(cmd, env=env, logfile=logfile)
        elif reg == "pypi":
            venv = vdir / "venv"
            python = server.get("python", sys.executable)
            spec = [f"{pkg}=={version}"] + pip_extra
            if shutil.which("uv"):
                run(["uv", "venv", "--quiet", "--python", python, str(venv)], env=env, logfile=logfile)
                run(["uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python")] + spec,
                    env=env, logfile=logfile)
            else:
                run([python, "-m", "venv", str(venv)], env=env, logfile=logfile)
                run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                     "--disable-pip-version-check"] + spec, env=env, logfile=logfile)
        else:
            raise RuntimeError(f"unknown registry {reg!r}")
        marker.write_text(stamp)
    return command_for(server, vdir)


def command_for(server, vdir):
    if server["registry"] == "npm":
        pkg_dir = vdir / "node_modules" / server["package"]
        bin_name = server.get("bin")
        if bin_name is None:
            meta = json.loads((pkg_dir / "package.json").read_text())
            b = meta.get("bin")
            if isinstance(b, str):
                return ["node", str(pkg_dir / b)]
            if isinstance(b, dict) and len(b) == 1:
                return ["node", str(pkg_dir / next(iter(b.values())))]
            raise RuntimeError(f"{server['package']}: set \"bin\" in the manifest (bins: {b})")
        return [str(vdir / "node_modules" / ".bin" / bin_name)]
    venv = vdir / "venv"
    if "module" in server:
        return [str(venv / "bin" / "python"), "-m", server["module"]]
    return [str(venv / "bin" / server.get("entry", server["package"]))]


# --------------------------------------------------------------------------- client

class StdioClient:
    def __init__(self, argv, env, cwd, stderr_path, roots_dir):
        self.stderr_file = open(stderr_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr_file, env=env, cwd=cwd,
                                     start_new_session=True)
        self.q = queue.Queue()
        self.roots_dir = roots_dir
        self.next_id = 0
        self.noise = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                self.noise.append(line[:200])  # a server logging to stdout; ignore
                continue
            if isinstance(msg, dict):
                self.q.put(msg)
        self.q.put(None)

    def send(self, msg):
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def notify(self, method, params=None):
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def request(self, method, params, deadline):
        self.next_id += 1
        rid = self.next_id
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"timed out waiting for {method}")
            try:
                msg = self.q.get(timeout=left)
            except queue.Empty:
                raise TimeoutError(f"timed out waiting for {method}")
            if msg is None:
                raise RuntimeError(f"server exited (code {self.proc.poll()}) before answering {method}")
            if "method" in msg and "id" in msg:  # a request from the server
                self._answer(msg)
                continue
            if "method" in msg:  # a notification (logging, list_changed...)
                continue
            if msg.get("id") != rid:
                continue
            if "error" in msg:
                raise RuntimeError(f"{method} failed: {json.dumps(msg['error'])}")
            return msg.get("result", {})

    def _answer(self, msg):
        method = msg["method"]
        if method == "ping":
            self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
        elif method == "roots/list":
            self.send({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "roots": [{"uri": Path(self.roots_dir).as_uri(), "name": "root"}]}})
        else:
            self.send({"jsonrpc": "2.0", "id": msg["id"],
                       "error": {"code": -32601, "message": f"method not supported: {method}"}})

    def close(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)  # our own child's process group
                except ProcessLookupError:
                    break
                try:
                    self.proc.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
        # children that outlived the leader (e.g. a wrapper's node process)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.stderr_file.close()


def list_tools(argv, env, cwd, stderr_path, timeout):
    last_err = None
    for proto in PROTOCOL_VERSIONS:
        client = StdioClient(argv, env, cwd, stderr_path, cwd)
        try:
            deadline = time.monotonic() + timeout
            client.request("initialize", {"protocolVersion": proto, "capabilities": {},
                                          "clientInfo": CLIENT_INFO}, deadline)
            client.notify("notifications/initialized")
            tools, cursor, pages = [], None, 0
            while True:
                params = {"cursor": cursor} if cursor else {}
                result = client.request("tools/list", params, deadline)
                tools.extend(result.get("tools", []))
                pages += 1
                cursor = result.get("nextCursor")
                if not cursor or pages > 1000:
                    break
            return tools, pages
        except (RuntimeError, TimeoutError, OSError) as e:
            last_err = e
        finally:
            client.close()
    raise last_err


# --------------------------------------------------------------------------- main

def version_entries(server):
    for v in server["versions"]:
        if isinstance(v, str):
            yield v, {}
        else:
            yield v["version"], v


def capture_one(server, version, vopts, args):
    sid = server["id"]
    out = OUT_DIR / sid / f"{version}.json"
    if out.exists() and not args.force:
        log(f"[{sid}@{version}] already captured: {out.relative_to(REPO)} (use --force to redo)")
        return True
    vdir = cache_root() / sid / version
    try:
        argv = install(server, version, vopts, vdir)
        workdir = vdir / "work"
        workdir.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.update(server.get("env", {}))
        env.update(vopts.get("env", {}))
        env = {k: v.replace("{workdir}", str(workdir)) for k, v in env.items()}
        extra = vopts.get("args", server.get("args", []))
        extra = [a.replace("{workdir}", str(workdir)) for a in extra]
        tools, pages = list_tools(argv + extra, env, str(workdir), vdir / "stderr.log",
                                  server.get("timeout", args.timeout))
    except Exception as e:  # noqa: BLE001 - report and go on with the others
        log(f"[{sid}@{version}] FAILED: {e}")
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(tools, indent=2, ensure_ascii=False) + "\n")
    tmp.replace(out)
    log(f"[{sid}@{version}] {len(tools)} tools ({pages} page(s)) -> {out.relative_to(REPO)}")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="capture again even if the list exists")
    ap.add_argument("--jobs", type=int, default=3, help="versions installed/captured in parallel")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per server run")
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument("select", nargs="*", help="server ids (or id@version) to capture; default all")
    args = ap.parse_args()

    servers = json.loads(args.manifest.read_text())
    known = {s["id"] for s in servers}
    for sel in args.select:
        if sel.split("@", 1)[0] not in known:
            ap.error(f"unknown server id {sel!r}; known: {', '.join(sorted(known))}")
    work = []
    for s in servers:
        for version, vopts in version_entries(s):
            if args.select and s["id"] not in args.select and f"{s['id']}@{version}" not in args.select:
                continue
            work.append((s, version, vopts))
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        results = list(ex.map(lambda w: capture_one(w[0], w[1], w[2], args), work))
    failed = results.count(False)
    log(f"done: {len(results) - failed} ok, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
