"""The local PyPI index of the upstream-releases tests: pypiserver, plus PyPI's JSON API.

    pypi_index.py --port N PACKAGES_DIR      (run by scripts/upstream-registries.sh up, in its venv)

pypiserver serves PACKAGES_DIR as usual (/simple/, /packages/, /health, its own /<name>/json) and never
redirects to pypi.org (--disable-fallback). pypiserver's own JSON has only info.version and the files'
urls, and not at PyPI's address, so this adds PyPI's, answered from the folder on each request:

    /pypi/<name>/json              info (name, version = latest, summary, requires_python, requires_dist),
                                   releases {version: [file]}, urls (the latest's files)
    /pypi/<name>/<version>/json    the same for one version (urls = its files)

A file is {filename, url, packagetype, size, digests.sha256, upload_time, upload_time_iso_8601, yanked,
requires_python}; its upload time is the file's mtime (the copy that publishes it, or `touch -d` in a test).
Answers carry a strong ETag (a hash of the body) and answer If-None-Match with 304.
"""

import argparse
import datetime
import email.parser
import hashlib
import json
import os
import zipfile
from pathlib import Path

import pypiserver
import waitress
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version
from pypiserver.config import Config


def distributions(root: Path, project: str) -> list[tuple[Version, Path]]:
    found = []
    for path in sorted(root.iterdir()):
        try:
            if path.name.endswith(".whl"):
                name, version, _, _ = parse_wheel_filename(path.name)
            elif path.name.endswith((".tar.gz", ".zip")):
                name, version = parse_sdist_filename(path.name)
            else:
                continue
        except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
            continue
        if name == project:
            found.append((version, path))
    return found


def metadata(path: Path) -> dict:
    """The wheel's METADATA (name, summary, requires); {} for an sdist or an unreadable wheel."""
    if not path.name.endswith(".whl"):
        return {}
    try:
        with zipfile.ZipFile(path) as wheel:
            member = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
            message = email.parser.Parser().parsestr(wheel.read(member).decode("utf-8"), headersonly=True)
    except (OSError, StopIteration, zipfile.BadZipFile, UnicodeDecodeError):
        return {}
    return {
        "name": message.get("Name"),
        "summary": message.get("Summary"),
        "requires_python": message.get("Requires-Python"),
        "requires_dist": message.get_all("Requires-Dist") or None,
    }


def file_entry(path: Path, base: str, requires_python: str | None) -> dict:
    stat = path.stat()
    uploaded = datetime.datetime.fromtimestamp(stat.st_mtime, datetime.timezone.utc)
    return {
        "filename": path.name,
        "url": f"{base}packages/{path.name}",
        "packagetype": "bdist_wheel" if path.name.endswith(".whl") else "sdist",
        "size": stat.st_size,
        "digests": {"sha256": hashlib.sha256(path.read_bytes()).hexdigest()},
        "upload_time": uploaded.strftime("%Y-%m-%dT%H:%M:%S"),
        "upload_time_iso_8601": uploaded.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "yanked": False,
        "yanked_reason": None,
        "requires_python": requires_python,
    }


def project_json(root: Path, base: str, project: str, version: str | None) -> dict | None:
    found = distributions(root, canonicalize_name(project))
    if not found:
        return None
    by_version: dict[Version, list[Path]] = {}
    for v, path in found:
        by_version.setdefault(v, []).append(path)
    if version is None:
        finals = [v for v in by_version if not v.is_prerelease]
        chosen = max(finals or by_version)
    else:
        try:
            chosen = Version(version)
        except InvalidVersion:
            return None
        if chosen not in by_version:
            return None
    meta = {}
    for path in by_version[chosen]:
        meta = metadata(path) or meta
    info = {
        "name": meta.get("name") or project,
        "version": str(chosen),
        "summary": meta.get("summary"),
        "requires_python": meta.get("requires_python"),
        "requires_dist": meta.get("requires_dist"),
        "yanked": False,
    }

    def files(v: Version) -> list[dict]:
        requires = meta.get("requires_python") if v == chosen else None
        return [file_entry(p, base, requires) for p in by_version[v]]

    body = {"info": info, "urls": files(chosen)}
    if version is None:
        body["releases"] = {str(v): files(v) for v in sorted(by_version)}
    return body


def with_json_api(app, root: Path):
    def wrapped(environ, start_response):
        parts = environ.get("PATH_INFO", "").strip("/").split("/")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD") or len(parts) not in (3, 4):
            return app(environ, start_response)
        if parts[0] != "pypi" or parts[-1] != "json":
            return app(environ, start_response)
        host = environ.get("HTTP_HOST") or f"{environ['SERVER_NAME']}:{environ['SERVER_PORT']}"
        base = f"{environ.get('wsgi.url_scheme', 'http')}://{host}/"
        body = project_json(root, base, parts[1], parts[2] if len(parts) == 4 else None)
        if body is None:
            payload = json.dumps({"message": "Not Found"}).encode()
            start_response("404 Not Found", [("Content-Type", "application/json"),
                                             ("Content-Length", str(len(payload)))])
            return [payload]
        payload = json.dumps(body, indent=1).encode()
        etag = '"' + hashlib.sha256(payload).hexdigest()[:32] + '"'
        wanted = [t.strip() for t in environ.get("HTTP_IF_NONE_MATCH", "").split(",")]
        if etag in wanted or f"W/{etag}" in wanted or "*" in wanted:
            start_response("304 Not Modified", [("ETag", etag)])
            return [b""]
        start_response("200 OK", [("Content-Type", "application/json"), ("ETag", etag),
                                  ("Content-Length", str(len(payload)))])
        return [b""] if environ["REQUEST_METHOD"] == "HEAD" else [payload]

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("root", type=Path)
    args = parser.parse_args()
    root = args.root.resolve()
    config = Config.from_args(["run", "--host", "127.0.0.1", "--port", str(args.port), "--disable-fallback",
                               "--health-endpoint", "/health", str(root)])
    app = pypiserver.setup_routes_from_config(pypiserver.app_from_config(config), config)
    print(f"pypiserver {pypiserver.__version__} on 127.0.0.1:{args.port} serving {root} (pid {os.getpid()})",
          flush=True)
    waitress.serve(with_json_api(app, root), host="127.0.0.1", port=args.port, threads=4, _quiet=True)


if __name__ == "__main__":
    main()
