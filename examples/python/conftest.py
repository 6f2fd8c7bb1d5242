"""Shared by the tests here: `driftline serve` on a free port (binary from DRIFTLINE_BIN) and HTTP helpers."""

import json
import os
import subprocess
import tempfile
import time
import urllib.request

import pytest

BIN = os.environ.get("DRIFTLINE_BIN", os.path.join(os.path.dirname(__file__), "../../target/debug/driftline"))


@pytest.fixture()
def driftline():
    """The base URL of a fresh `driftline serve`."""
    data = tempfile.mkdtemp(prefix="driftline-py-")
    process = subprocess.Popen(
        [BIN, "serve", "--bind", "127.0.0.1:0", "--data-dir", data],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = process.stdout.readline()
    assert line.startswith("driftline listening on "), line
    yield line.strip().removeprefix("driftline listening on ")
    process.terminate()
    process.wait(timeout=20)


def get(url, parse=json.loads):
    with urllib.request.urlopen(url, timeout=5) as response:
        return parse(response.read())


def wait_for(url, done, what):
    deadline = time.monotonic() + 10
    while True:
        body = get(url)
        if done(body):
            return body
        assert time.monotonic() < deadline, f"waited 10 s for {what}: {body}"
        time.sleep(0.05)
