"""Fakes for the probe tests: an HTTP server that serves known documents (and misbehaves on
request), and an in-memory store that can be made unreachable."""

from __future__ import annotations

import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from crosszone.store.store import Event, Store, StoreUnavailable


class FakeStore(Store):
    """A dict with revisions; `down = True` makes every call raise StoreUnavailable."""

    def __init__(self) -> None:
        self.items: dict[str, bytes] = {}
        self.rev = 0
        self.down = False
        self.writes: list[tuple[str, bytes]] = []

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("fake store is down")

    def put_many(self, items: Mapping[str, bytes | None]) -> int:
        self._check()
        self.rev += 1
        for k, v in items.items():
            if v is None:
                self.items.pop(k, None)
            else:
                self.items[k] = v
                self.writes.append((k, v))
        return self.rev

    def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        self._check()
        return {k: v for k, v in self.items.items() if k.startswith(prefix)}, self.rev

    def watch(self, prefix: str, after: int, timeout: float) -> list[Event]:
        return []

    def revision(self) -> int:
        return self.rev


class _V6Server(ThreadingHTTPServer):
    address_family = socket.AF_INET6


class FakeHttp:
    """Serves `docs` (path -> bytes) with HTTP/1.1 and a Content-Length on 127.0.0.1 or ::1.
    `mode` changes what it answers: 'ok', 'chunked', 'lie_length' (a Content-Length one less
    than the body), 'flip' (one byte of the body changed), 'longer' (a byte appended),
    'shorter' (the last byte missing, honest length), 'huge_header'."""

    def __init__(self, docs: dict[str, bytes], host: str = "127.0.0.1") -> None:
        self.docs = docs
        self.mode = "ok"
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_a: object) -> None:  # quiet tests
                pass

            def do_GET(self) -> None:
                outer.requests.append(self.path)
                body = outer.docs.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                mode = outer.mode
                if mode == "flip" and body:
                    body = bytes([body[0] ^ 1]) + body[1:]
                elif mode == "longer":
                    body = body + b"!"
                elif mode == "shorter":
                    body = body[:-1]
                self.send_response(200)
                if mode == "chunked":
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
                    return
                if mode == "huge_header":
                    self.send_header("X-Pad", "x" * 20000)
                length = len(body) - 1 if mode == "lie_length" else len(body)
                self.send_header("Content-Length", str(length))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(body)

        cls = _V6Server if ":" in host else ThreadingHTTPServer
        self.server = cls((host, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
