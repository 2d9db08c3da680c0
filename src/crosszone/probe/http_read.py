"""Byte-exact HTTP reads of known content: what a canary or guard probe does once.

A migration is proven by reads from compute endpoints to storage nodes, each on a fresh TCP
connection (a new source port, so successive reads hash over every gateway the routers may
pick). The body must equal what the node is known to serve, byte for byte (its size and SHA-256):
a gateway that mangled a packet fails the read just as one that dropped it. The emulator's
migration guards and the `crosszone probe` daemon both read through this module.

A read has two deadlines. The connection must be up within `connect_s` (1 s): the SYN and the
SYN-ACK cross the gateways both ways and the node's kernel answers, so a gateway or route that
drops a read's packets fails here. The whole answer must then arrive within `response_s` (5 s):
it also waits for the node's server, which may be slow without the path being at fault (on the
emulator, one guard round saw every read of one node miss a single 1 s deadline while a UDP probe
over the same gateways lost nothing). Slow answers still count, in the latency guard. A failed
read says which deadline it missed (`connect:` or `response:`).

A target's `dscp` marks the read's segments from the SYN on: where the network has priority
queues, a read sent in their first class measures the gateways and the routes, never a SYN lost
at a FIFO that bulk traffic keeps full. A target's `ns` opens its socket in that network
namespace (setns from this thread: no new process per read), which the emulator uses; a probe
daemon on a real host leaves it empty.

Answers are read with HTTP/1.1 and `Connection: close`. A chunked answer is refused (a static
file server sends a Content-Length), and so is anything longer than the expected size: the read
never holds more than the expected document in memory.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import re
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from crosszone.linux.netns import in_netns

CONNECT_S = 1.0
RESPONSE_S = 5.0
#: An answer's header may not be longer than this (a static file server's is a few hundred).
MAX_HEADER = 16 * 1024
_STATUS = re.compile(rb"HTTP/1\.[01] (\d{3})")


@dataclass(frozen=True)
class Expected:
    """The known content: its size in bytes and SHA-256 (lower-case hex)."""

    size: int
    sha256: str

    def __post_init__(self) -> None:
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 0:
            raise ValueError(f"expected size {self.size!r}: must be an integer >= 0")
        if not re.fullmatch(r"[0-9a-f]{64}", str(self.sha256)):
            raise ValueError(f"expected sha256 {self.sha256!r}: must be 64 lower-case hex digits")

    @classmethod
    def of(cls, content: bytes) -> Expected:
        """The expectation of exactly `content`."""
        return cls(len(content), hashlib.sha256(content).hexdigest())


@dataclass(frozen=True)
class Target:
    """One read: GET `path` from `server` (an IPv4 or IPv6 address) on `port`, expecting
    `expect`; from source address `source` and network namespace `ns` when given. `name`
    says what is read (a storage node's name) in reports."""

    server: str
    path: str
    expect: Expected
    port: int = 80
    source: str | None = None
    ns: str | None = None
    dscp: int = 0  # of every segment the read sends, its SYN included (0 to 63)
    name: str = ""

    @property
    def family(self) -> int:
        """4 or 6."""
        return ipaddress.ip_address(self.server).version


@dataclass(frozen=True)
class Outcome:
    """How one read went: `ms` from the first connect to the last byte (or the failure),
    `nbytes` the body bytes received; `error` says why it failed ('' when ok)."""

    target: Target
    ok: bool
    ms: float
    nbytes: int = 0
    error: str = ""


def mark(s: socket.socket, family: socket.AddressFamily, dscp: int) -> None:
    """Everything `s` sends carries `dscp` (ECN bits 0), IPv4 TOS or IPv6 traffic class."""
    if not 0 <= dscp <= 63:
        raise ValueError(f"dscp {dscp}: must be 0 to 63")
    if dscp:
        if family == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, dscp << 2)
        else:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)


def connect(t: Target, timeout: float) -> socket.socket:
    """A TCP connection to the target, marked with its DSCP from the SYN on."""
    family = socket.AF_INET6 if ":" in t.server else socket.AF_INET
    with in_netns(t.ns):
        s = socket.socket(family, socket.SOCK_STREAM)
    try:
        mark(s, family, t.dscp)
        s.settimeout(timeout)
        if t.source:
            s.bind((t.source, 0))
        s.connect((t.server, t.port))
    except BaseException:
        s.close()
        raise
    return s


class _Refused(Exception):
    """The answer is not the expected document (the message says how)."""


def _recv(s: socket.socket, deadline: float) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    s.settimeout(left)
    return s.recv(65536)


def _answer(s: socket.socket, t: Target, deadline: float) -> int:
    """Read the answer to the request already sent; return the body's size when it is the
    expected document, else raise _Refused (or OSError from the socket)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        if len(buf) > MAX_HEADER:
            raise _Refused(f"header longer than {MAX_HEADER} bytes")
        chunk = _recv(s, deadline)
        if not chunk:
            raise _Refused(f"connection closed in the header: {buf[:40]!r}")
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    if len(head) > MAX_HEADER:  # it may have come in one piece
        raise _Refused(f"header longer than {MAX_HEADER} bytes")
    lines = head.split(b"\r\n")
    status = _STATUS.match(lines[0])
    if not status or status.group(1) != b"200":
        raise _Refused(f"{lines[0][:40]!r}")
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"transfer-encoding" and value != b"identity":
            raise _Refused(f"transfer-encoding {value[:20]!r} (expected a Content-Length)")
        if name == b"content-length":
            if not value.isdigit():
                raise _Refused(f"content-length {value[:20]!r}")
            length = int(value)
    if length is not None and length != t.expect.size:
        raise _Refused(f"body differs (content-length {length}, expected {t.expect.size})")
    # With a Content-Length (already checked equal to the size) the body ends there: a server
    # that keeps the connection open despite `Connection: close` must not hold the read until
    # its deadline. Without one it ends at EOF, and one byte past the size is enough to refuse.
    want = t.expect.size if length is not None else t.expect.size + 1
    digest = hashlib.sha256(body[: t.expect.size + 1])
    got = len(body)
    while got < want:
        chunk = _recv(s, deadline)
        if not chunk:
            break
        digest.update(chunk[: t.expect.size + 1 - got])
        got += len(chunk)
    if got != t.expect.size or digest.hexdigest() != t.expect.sha256:
        more = "at least " if got > t.expect.size else ""
        raise _Refused(f"body differs ({more}{got} bytes, expected {t.expect.size})")
    return got


def read_once(t: Target, connect_s: float = CONNECT_S, response_s: float = RESPONSE_S
              ) -> Outcome:
    """GET t.path over a fresh connection; ok when the status is 200 and the body is exactly
    the expected document. The connection must be up within `connect_s`, the whole answer in
    `response_s` more."""
    t0 = time.monotonic()
    host = f"[{t.server}]" if ":" in t.server else t.server
    phase = "connect"
    nbytes = 0
    try:
        s = connect(t, connect_s)
        try:
            phase = "response"
            deadline = time.monotonic() + response_s
            s.settimeout(response_s)
            s.sendall(f"GET {t.path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: crosszone-probe"
                      "\r\nConnection: close\r\n\r\n".encode())
            nbytes = _answer(s, t, deadline)
        finally:
            s.close()
    except _Refused as exc:
        return Outcome(t, False, (time.monotonic() - t0) * 1000, 0, f"{t.server}: {exc}")
    except OSError as exc:
        return Outcome(t, False, (time.monotonic() - t0) * 1000, 0,
                       f"{t.server}: {phase}: {exc!r}")
    return Outcome(t, True, (time.monotonic() - t0) * 1000, nbytes)


def run_round(targets: Sequence[Target], connect_s: float = CONNECT_S,
              response_s: float = RESPONSE_S, parallel: int = 8) -> list[Outcome]:
    """Every target once, `parallel` at a time, in the order given."""
    if not targets:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(targets)))) as pool:
        return list(pool.map(lambda t: read_once(t, connect_s, response_s), targets))


def p99_ms(latencies: Sequence[float]) -> float:
    """Nearest-rank p99 of `latencies` (0 when there are none)."""
    lat = sorted(latencies)
    if not lat:
        return 0.0
    return lat[min(len(lat) - 1, max(0, math.ceil(0.99 * len(lat)) - 1))]
