"""Sequence-numbered UDP probe through the gateways, both directions, counting every loss.

`send` (in a compute endpoint's namespace) sends `--pps` datagrams per second per family over
`--flows` flows per family (one socket, one source port, each); `echo` (on a storage node)
returns each one. The sender records when it sent every sequence number and which came back;
the echo records which arrived. So a datagram lost toward storage is one the echo never saw,
and one lost toward compute is one the echo saw but the sender never got back. Both run until
SIGTERM (or --duration), then print one JSON document.

Loss windows: within a flow, a run of consecutive lost sequence numbers spans from the first
one's send time to the last one's plus the flow's interval (the time that flow saw nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import selectors
import signal
import socket
import struct
import sys
import time
from array import array
from typing import Any

PKT = struct.Struct("!HIQ")  # flow id, sequence number, send time (ns)
PAYLOAD = 64  # bytes per datagram


class Stop:
    """Set by SIGTERM/SIGINT: stop at the next loop turn."""

    def __init__(self) -> None:
        self.flag = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._set)

    def _set(self, *_a: object) -> None:
        self.flag = True


def _ranges(seen: bytearray, count: int) -> list[int]:
    """Sequence numbers below `count` that are not marked in `seen`."""
    return [i for i in range(count) if i >= len(seen) or not seen[i]]


def _mark(seen: bytearray, seq: int) -> None:
    if seq >= len(seen):
        seen.extend(bytes(seq + 1 - len(seen) + 4096))
    seen[seq] = 1


def echo(port: int, duration: float, linger: float) -> dict[str, Any]:
    """Return every datagram to its sender; report what arrived per flow."""
    stop = Stop()
    socks = []
    for fam, addr in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        s = socket.socket(fam, socket.SOCK_DGRAM)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        s.bind((addr, port))
        s.setblocking(False)
        socks.append(s)
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    seen: dict[int, bytearray] = {}
    end = time.monotonic() + duration
    stop_at: float | None = None
    while True:
        now = time.monotonic()
        if stop_at is None and (stop.flag or now > end):
            stop_at = now + linger  # keep answering stragglers for a moment
        if stop_at is not None and now > stop_at:
            break
        for key, _ in sel.select(0.05):
            s = key.fileobj
            assert isinstance(s, socket.socket)
            while True:
                try:
                    data, peer = s.recvfrom(2048)
                except BlockingIOError:
                    break
                if len(data) < PKT.size:
                    continue
                flow, seq, _t = PKT.unpack_from(data)
                _mark(seen.setdefault(flow, bytearray()), seq)
                with contextlib.suppress(OSError):
                    s.sendto(data, peer)
    return {"flows": {str(f): bytes(b).rstrip(b"\0").hex() for f, b in seen.items()}}


def send(servers: list[str], port: int, flows: int, pps: float, duration: float
         ) -> dict[str, Any]:
    """Send to each server (one per family) at `pps` over `flows` flows; record echoes."""
    stop = Stop()
    socks: list[socket.socket] = []
    for server in servers:
        fam = socket.AF_INET6 if ":" in server else socket.AF_INET
        for _ in range(flows):
            s = socket.socket(fam, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
            s.connect((server, port))
            s.setblocking(False)
            socks.append(s)
    nflows = len(socks)
    rate = pps * len(servers)  # datagrams per second, all flows
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    sent_at = array("d")  # send time of datagram k (flow k % nflows, seq k // nflows)
    back = [bytearray() for _ in range(nflows)]
    pad = bytes(PAYLOAD - PKT.size)
    t0 = time.time()
    m0 = time.monotonic()
    k = 0
    while not stop.flag and time.monotonic() - m0 < duration:
        due = int((time.monotonic() - m0) * rate) + 1
        while k < due:
            flow, seq = k % nflows, k // nflows
            now = time.time()
            # A refused send is counted as lost: the echo never sees it.
            with contextlib.suppress(OSError):
                socks[flow].send(PKT.pack(flow, seq, int(now * 1e9)) + pad)
            sent_at.append(now)
            k += 1
        _drain(sel, back, timeout=max(0.0, (k / rate) - (time.monotonic() - m0)))
    grace = time.monotonic() + 1.0
    while time.monotonic() < grace:
        _drain(sel, back, timeout=0.05)
    return {"t0": t0, "rate": rate, "flows": nflows, "sent": k,
            "sent_at": sent_at.tobytes().hex(),
            "back": {str(f): bytes(b).rstrip(b"\0").hex() for f, b in enumerate(back)}}


def _drain(sel: selectors.BaseSelector, back: list[bytearray], timeout: float) -> None:
    for key, _ in sel.select(timeout):
        s = key.fileobj
        assert isinstance(s, socket.socket)
        while True:
            try:
                data = s.recv(2048)
            except (BlockingIOError, ConnectionRefusedError):
                break
            if len(data) >= PKT.size:
                flow, seq, _t = PKT.unpack_from(data)
                if flow < len(back):
                    _mark(back[flow], seq)


def _bits(hexstr: str) -> bytes:
    return bytes.fromhex(hexstr)


def losses(sent: dict[str, Any], echoed: dict[str, Any]) -> list[tuple[str, int, float]]:
    """Every lost datagram as (direction, flow, send time): 'to_storage' or 'to_compute'."""
    n = sent["flows"]
    times = array("d")
    times.frombytes(bytes.fromhex(sent["sent_at"]))
    at_echo = {int(f): _bits(h) for f, h in echoed["flows"].items()}
    back = {int(f): _bits(h) for f, h in sent["back"].items()}
    out = []
    for k in range(sent["sent"]):
        flow, seq = k % n, k // n
        b = back.get(flow, b"")
        if seq < len(b) and b[seq]:
            continue
        e = at_echo.get(flow, b"")
        direction = "to_compute" if seq < len(e) and e[seq] else "to_storage"
        out.append((direction, flow, times[k]))
    return out


def windows_ms(lost: list[tuple[str, int, float]], flow_interval_s: float) -> float:
    """Longest time one flow saw nothing, over the runs of consecutive losses in each flow."""
    by_flow: dict[tuple[str, int], list[float]] = {}
    for d, f, t in lost:
        by_flow.setdefault((d, f), []).append(t)
    worst = 0.0
    for ts in by_flow.values():
        ts.sort()
        start = prev = ts[0]
        for t in ts[1:]:
            if t - prev > 1.5 * flow_interval_s:  # a new run
                worst = max(worst, prev - start + flow_interval_s)
                start = t
            prev = t
        worst = max(worst, prev - start + flow_interval_s)
    return worst * 1000


def main(argv: list[str] | None = None) -> int:
    """`python -m crosszone.workload.udp_probe echo|send ...` (run inside a namespace)."""
    ap = argparse.ArgumentParser(prog="udp_probe")
    ap.add_argument("mode", choices=("echo", "send"))
    ap.add_argument("--port", type=int, default=9977)
    ap.add_argument("--servers", default="", help="send: one address per family, comma list")
    ap.add_argument("--flows", type=int, default=16)
    ap.add_argument("--pps", type=float, default=2000.0, help="send: per family")
    ap.add_argument("--duration", type=float, default=3600.0)
    a = ap.parse_args(argv)
    if a.mode == "echo":
        doc = echo(a.port, a.duration, linger=1.5)
    else:
        doc = send([x for x in a.servers.split(",") if x], a.port, a.flows, a.pps, a.duration)
    sys.stdout.write(json.dumps(doc) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
