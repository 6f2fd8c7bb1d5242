"""The part of the ClickHouse HTTP interface that the `clickhouse` Rust crate uses, served from chDB.

chDB is the ClickHouse engine in-process and has no HTTP listener (DESIGN.md §11). This serves:
  GET|HEAD /ping, GET /                      liveness ("Ok.")
  POST /?query=INSERT ... FORMAT F [&decompress=1]   body = rows (LZ4 native blocks when decompress=1)
  POST|GET /?default_format=F [&database=D] [&k=v]   body (or ?query=) = SQL; result in format F
Errors follow ClickHouse: non-200 status, header X-ClickHouse-Exception-Code, body "Code: N. DB::Exception: ...".
Results are buffered whole, so no error can start mid-stream.

Facts and chDB pitfalls this works around: ../../../../shared/notes/clickhouse-http-on-chdb.md
  - a failed query can leak output into the next query on its connection: run `SELECT 1` after any error;
  - `USE db` and `SET` are connection state: applied per request, settings reset afterwards;
  - one data path per process: a pool of connections to the one path (they run in parallel).

usage: chdb_http.py --port 18123 --path DATA_DIR [--connections 4]
"""

import argparse
import http.server
import queue
import re
import signal
import struct
import sys
import urllib.parse

import chdb
import lz4.block

try:  # checksums are verified when the cityhash module is present
    from clickhouse_cityhash.cityhash import CityHash128
except ImportError:  # pragma: no cover
    CityHash128 = None

IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CODE = re.compile(r"Code: (\d+)\.")
FORMAT_TAIL = re.compile(r"\s+FORMAT\s+(\w+)\s*$", re.IGNORECASE)
# Query parameters that are not settings.
NOT_SETTINGS = {"query", "database", "default_format", "decompress", "compress", "user", "password"}


class ClientError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def decompress_blocks(data):
    """ClickHouse compressed native blocks: [16B checksum][method][u32 size incl. 9B header][u32 raw][payload]."""
    out = bytearray()
    at = 0
    while at < len(data):
        if len(data) - at < 25:
            raise ClientError(432, "truncated compressed block header")
        checksum = data[at : at + 16]
        method, compressed, raw = struct.unpack_from("<BII", data, at + 16)
        block = data[at + 16 : at + 16 + compressed]
        if len(block) != compressed:
            raise ClientError(432, "truncated compressed block")
        if CityHash128 is not None:
            h = CityHash128(block)
            if struct.pack("<QQ", h >> 64, h & (2**64 - 1)) != checksum:
                raise ClientError(40, "checksum does not match: corrupted data")
        payload = block[9:]
        if method == 0x82:
            out += lz4.block.decompress(payload, uncompressed_size=raw)
        elif method == 0x02:
            out += payload
        else:
            raise ClientError(89, f"unknown compression method {method:#x}")
        at += 16 + compressed
    return bytes(out)


class Pool:
    def __init__(self, path, size):
        self.free = queue.Queue()
        for _ in range(size):
            self.free.put(chdb.connect(path))

    def run(self, work):
        connection = self.free.get()
        try:
            return work(connection)
        finally:
            self.free.put(connection)


def execute(connection, params, body):
    database = params.get("database", "default")
    if not IDENTIFIER.match(database):
        raise ClientError(81, f"bad database name {database!r}")
    settings = {k: v for k, v in params.items() if k not in NOT_SETTINGS and not k.startswith("param_")}
    for key in settings:
        if not IDENTIFIER.match(key):
            raise ClientError(115, f"unknown setting {key!r}")
    try:
        connection.query(f"USE {database}")
        for key, value in settings.items():
            connection.query(f"SET {key} = '{escape(value)}'")
        if "query" in params and body:
            return insert(connection, params, body)
        sql = (params.get("query", "") + ("\n" if "query" in params else "") + body.decode("utf-8")).strip()
        if not sql:
            raise ClientError(62, "empty query")
        result = connection.query(sql, params.get("default_format", "TabSeparated"))
        return result.bytes() if result is not None else b""
    except Exception:
        # chDB pitfall 1: clear whatever a failed query left on this connection.
        try:
            connection.query("SELECT 1")
        except Exception:
            pass
        raise
    finally:
        for key in settings:
            try:
                connection.query(f"SET {key} = DEFAULT")
            except Exception:
                pass


def insert(connection, params, body):
    sql = params["query"]
    match = FORMAT_TAIL.search(sql)
    if not match:
        raise ClientError(62, "an INSERT with data needs a FORMAT clause")
    if params.get("decompress") == "1":
        body = decompress_blocks(body)
    inserter = connection.send_insert(sql[: match.start()], match.group(1))
    try:
        inserter.append(body)
        inserter.finish()
    except Exception:
        try:
            inserter.cancel()
        except Exception:
            pass
        raise
    return b""


def escape(value):
    return value.replace("\\", "\\\\").replace("'", "\\'")


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as ClickHouse's own server sets it: the body written after the headers would otherwise
    # wait for the client's delayed ACK (≈ 40 ms on every answer).
    disable_nagle_algorithm = True
    pool = None

    def log_message(self, *args):  # quiet: errors are returned to the client
        pass

    def do_HEAD(self):
        self.reply(200, b"", head=True)

    def do_GET(self):
        path, _, query = self.path.partition("?")
        if path in ("/ping", "/") and not query:
            return self.reply(200, b"Ok.\n")
        self.handle_query(b"")

    def do_POST(self):
        try:
            body = self.read_body()
        except (ValueError, ClientError) as err:
            return self.error(400, getattr(err, "code", 27), str(err))
        self.handle_query(body)

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length)

    def handle_query(self, body):
        _, _, query = self.path.partition("?")
        params = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
        if self.headers.get("Content-Type", "").startswith("multipart/form-data"):
            return self.error(400, 48, "multipart query parameters are not supported by this endpoint")
        try:
            result = self.pool.run(lambda connection: execute(connection, params, body))
        except ClientError as err:
            return self.error(400, err.code, str(err))
        except Exception as err:  # chDB reports engine errors as "Code: N. DB::Exception: ..."
            text = str(err)
            match = CODE.search(text)
            code = int(match.group(1)) if match else 1001
            status = 404 if code == 60 else 400 if code in (27, 36, 47, 62, 115, 396) else 500
            return self.error(status, code, text)
        self.reply(200, result)

    def error(self, status, code, text):
        if not text.startswith("Code:"):
            text = f"Code: {code}. DB::Exception: {text}"
        self.reply(status, (text + "\n").encode("utf-8"), extra={"X-ClickHouse-Exception-Code": str(code)})

    def reply(self, status, payload, head=False, extra=None):
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if not head:
            self.wfile.write(payload)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hangs up mid-request (a test stopping a service) is not the server's error.
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            return
        super().handle_error(request, client_address)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=18123)
    parser.add_argument("--path", required=True)
    parser.add_argument("--connections", type=int, default=4)
    args = parser.parse_args()
    Handler.pool = Pool(args.path, args.connections)
    server = Server(("127.0.0.1", args.port), Handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"chdb http listening on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass


if __name__ == "__main__":
    main()
