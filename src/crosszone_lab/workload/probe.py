"""Guard and canary probes: real HTTP reads of known content, from inside any namespace.

A migration checks each step with reads from every compute endpoint to every storage node, in
both families, each on a fresh TCP connection (a new source port, so successive probes hash over
every gateway the routers may pick). The body must equal what the node is known to serve, byte
for byte: a gateway that mangled a packet fails the probe just as one that dropped it.

Sockets are opened in the endpoint's namespace with setns from a thread of this process (no
`ip netns exec` and no new interpreter per probe: a round of 32 reads costs milliseconds of CPU,
which matters on a box whose two cores also run the network under test).

A target's `dscp` marks the probe's segments from the SYN on. Where the emulator has queues,
the migration sends its probes in their first class and the storage nodes answer in the class
a connection's SYN came in (`tcp_reflect_tos`, emulate/queues.py): a probe then measures the
gateways and the routes, and never a SYN lost at a FIFO the workload keeps full (a second's
retransmission timeout, a failed read).

A read has two deadlines. The connection must be up within `connect_s` (1 s): the SYN and the
SYN-ACK cross the gateways both ways and the node's kernel answers, so a gateway or route that
drops a read's packets fails here. The whole answer must then arrive within `response_s` (5 s):
it also waits for the node's server, which on the emulator is an nginx worker at the workload's
priority sharing two cores with everything else. Under the `bench migrate` workload with two
busy loops, the workload's own small requests had a p999 of 1.3 s, and one guard round saw
every read of one node time out at a single 1 s deadline while the UDP probe lost nothing: the
server was slow, not the path. Slow answers still count, in the latency guard (p99 factor).
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from crosszone.linux.netns import in_netns
from crosszone_lab.workload import udp_probe


@dataclass(frozen=True)
class Target:
    """One read: from namespace `ns` (source `source`, optional), GET `path` from `server`."""

    ns: str
    server: str
    path: str
    expect: bytes
    source: str | None = None
    port: int = 80
    dscp: int = 0  # of every segment the probe sends, its SYN included (0 to 63)


@dataclass(frozen=True)
class Outcome:
    """How one read went."""

    target: Target
    ok: bool
    ms: float
    error: str = ""


CONNECT_S = 1.0
RESPONSE_S = 5.0


def _connect(t: Target, timeout: float) -> socket.socket:
    family = socket.AF_INET6 if ":" in t.server else socket.AF_INET
    with in_netns(t.ns):
        s = socket.socket(family, socket.SOCK_STREAM)
    try:
        udp_probe.mark(s, family, t.dscp)
        s.settimeout(timeout)
        if t.source:
            s.bind((t.source, 0))
        s.connect((t.server, t.port))
    except BaseException:
        s.close()
        raise
    return s


def read_once(t: Target, connect_s: float = CONNECT_S, response_s: float = RESPONSE_S
              ) -> Outcome:
    """GET t.path over a fresh connection; ok when the status is 200 and the body is exact.
    The connection must be up within `connect_s`, the whole answer in `response_s` more."""
    t0 = time.monotonic()
    host = f"[{t.server}]" if ":" in t.server else t.server
    phase = "connect"
    try:
        s = _connect(t, connect_s)
        try:
            phase = "response"
            deadline = time.monotonic() + response_s
            s.settimeout(response_s)
            s.sendall(f"GET {t.path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                      .encode())
            chunks = []
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("timed out")
                s.settimeout(left)
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        finally:
            s.close()
    except OSError as exc:
        return Outcome(t, False, (time.monotonic() - t0) * 1000,
                       f"{t.ns} -> {t.server}: {phase}: {exc!r}")
    ms = (time.monotonic() - t0) * 1000
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        return Outcome(t, False, ms, f"{t.ns} -> {t.server}: {head[:40]!r}")
    if body != t.expect:
        return Outcome(t, False, ms, f"{t.ns} -> {t.server}: body differs "
                                     f"({len(body)} bytes, expected {len(t.expect)})")
    return Outcome(t, True, ms)


def run_round(targets: Sequence[Target], connect_s: float = CONNECT_S,
              response_s: float = RESPONSE_S, parallel: int = 8) -> list[Outcome]:
    """Every target once, `parallel` at a time."""
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return list(pool.map(lambda t: read_once(t, connect_s, response_s), targets))


def p99_ms(outcomes: Sequence[Outcome]) -> float:
    """Nearest-rank p99 latency of the successful reads (0 when there are none)."""
    lat = sorted(o.ms for o in outcomes if o.ok)
    if not lat:
        return 0.0
    return lat[min(len(lat) - 1, max(0, math.ceil(0.99 * len(lat)) - 1))]
