"""Sequence-numbered UDP probe: counts every lost packet and times every gap, per direction.

One peer process runs on each side (an endpoint namespace, a storage node namespace). Each peer
sends its own stream to the other at a fixed rate, round-robin over `flows` source ports (each a
different ECMP hash on every hop), and receives the other's stream on one port. A datagram carries
(sequence number, send time); the receiver keeps (sequence number, kernel receive time), the
kernel's SO_TIMESTAMPNS, so a peer that is descheduled for a while still times what the network
delivered correctly (its receive buffer is forced large enough to hold the backlog).

Both sides use CLOCK_REALTIME, which all namespaces of one machine share, so send times, receive
times and the times at which a caller injected an event are on one axis.

The peers write their records to files (`Record.save`); `analyse` turns a sender's and a receiver's
records into the counts and the loss window: the longest run of consecutive lost sequence numbers,
measured in send time, and when traffic came back (the receive time of the first datagram after it).
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crosszone.probe.http_read import mark  # the TCP reads mark their segments the same way

HEADER = struct.Struct("!QQ")  # sequence number, send time (ns, CLOCK_REALTIME)
PAYLOAD_BYTES = 64
SO_RCVBUFFORCE = 33
SO_TIMESTAMPNS = 35
RCVBUF_BYTES = 16 << 20
#: A peer that fell behind its schedule sends at most this many datagrams at once to catch up.
MAX_BURST = 64


@dataclass
class Record:
    """What one peer saw of one stream: send times by sequence number, or receptions."""

    seq: array  # type: ignore[type-arg]
    ns: array  # type: ignore[type-arg]

    @classmethod
    def empty(cls) -> Record:
        """A record with nothing in it yet."""
        return cls(array("Q"), array("q"))

    def save(self, path: Path) -> None:
        """Write as two arrays of 8-byte integers (machine byte order: read on this machine)."""
        with path.open("wb") as f:
            f.write(struct.pack("Q", len(self.seq)))
            self.seq.tofile(f)
            self.ns.tofile(f)

    @classmethod
    def load(cls, path: Path) -> Record:
        """Read what `save` wrote."""
        rec = cls.empty()
        with path.open("rb") as f:
            (n,) = struct.unpack("Q", f.read(8))
            rec.seq.fromfile(f, n)
            rec.ns.fromfile(f, n)
        return rec


@dataclass(frozen=True)
class Gap:
    """A loss episode (see `analyse`)."""

    first: int  # sequence number of the first lost datagram
    start_ns: int  # its send time
    window_ms: float  # send time spanned by the run, plus one sending interval
    restored_ns: int | None  # receive time of the next datagram that arrived, if any


@dataclass(frozen=True)
class Analysis:
    """Counts and the longest gap of one stream over one time slice."""

    sent: int
    received: int
    lost: int
    longest: Gap | None

    def to_json(self) -> dict[str, object]:
        """Flat JSON form (times in ms relative to nothing: the caller subtracts its own t0)."""
        g = self.longest
        return {"sent": self.sent, "received": self.received, "lost": self.lost,
                "loss_window_ms": round(g.window_ms, 2) if g else 0.0}


def analyse(sent: Record, received: Record, interval_ns: int, flows: int,
            since_ns: int = 0, until_ns: int | None = None) -> Analysis:
    """Losses of the datagrams sent in [since_ns, until_ns): counts and the longest loss episode.

    A sender spreads its sequence numbers round-robin over `flows` source ports (flow = seq %
    flows), and a failed path loses only the flows hashed onto it while the others' datagrams keep
    arriving in between. So runs of lost datagrams are taken per flow (consecutive sequence
    numbers of one flow, all lost), each spanning the send times of its first and last datagram;
    runs of different flows that overlap, or follow each other within one round of the flows
    (flows x interval), form one episode. Its window is the send time from its first lost
    datagram to its last, plus one interval: a sender that was descheduled in the middle of an
    outage makes it longer, never shorter. Traffic is restored when every flow of the episode
    has delivered again (the latest receive time of each run's next datagram that arrived).
    Duplicates count once."""
    got = dict(zip(received.seq, received.ns, strict=True))
    by_flow: dict[int, list[tuple[int, int]]] = {}
    lost = total = 0
    for s, t in zip(sent.seq, sent.ns, strict=True):
        if t < since_ns or (until_ns is not None and t >= until_ns):
            continue
        total += 1
        lost += s not in got
        by_flow.setdefault(s % flows, []).append((s, t))
    runs = []  # (start ns, end ns, first seq, restored ns or None)
    for seqs in by_flow.values():
        i = 0
        while i < len(seqs):
            if seqs[i][0] in got:
                i += 1
                continue
            j = i
            while j + 1 < len(seqs) and seqs[j + 1][0] not in got:
                j += 1
            nxt = got.get(seqs[j + 1][0]) if j + 1 < len(seqs) else None
            runs.append((seqs[i][1], seqs[j][1], seqs[i][0], nxt))
            i = j + 1
    runs.sort()
    longest: Gap | None = None
    round_ns = interval_ns * flows
    k = 0
    while k < len(runs):
        start, end, first, restored = runs[k]
        ends_open = restored is None
        m = k + 1
        while m < len(runs) and runs[m][0] <= end + round_ns:
            end = max(end, runs[m][1])
            ends_open |= runs[m][3] is None
            restored = max(restored or 0, runs[m][3] or 0)
            m += 1
        window = (end - start + interval_ns) / 1e6
        if longest is None or window > longest.window_ms:
            longest = Gap(first, start, window, None if ends_open else restored)
        k = m
    return Analysis(sent=total, received=total - lost, lost=lost, longest=longest)


def _recv_all(sock: socket.socket, rec: Record) -> None:
    """Drain a non-blocking socket into `rec` with the kernel's receive time of each datagram."""
    while True:
        try:
            data, anc, _flags, _addr = sock.recvmsg(256, 64)
        except BlockingIOError:
            return
        if len(data) < HEADER.size:
            continue
        seq, _sent = HEADER.unpack_from(data)
        rx = time.time_ns()
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", value[:16])
                rx = sec * 1_000_000_000 + nsec
        rec.seq.append(seq)
        rec.ns.append(rx)


def _family(addr: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def sender(fam: socket.AddressFamily, bind: str, dscp: int = 0) -> socket.socket:
    """A sending socket bound to `bind` (any port) whose datagrams carry `dscp`."""
    s = socket.socket(fam, socket.SOCK_DGRAM)
    try:
        mark(s, fam, dscp)
    except ValueError:
        s.close()
        raise
    s.bind((bind, 0))
    return s


def run_peer(bind: str, port: int, to: str, rate: float, flows: int, duration: float,
             out: Path, linger: float = 1.0, stop: Callable[[], bool] = lambda: False,
             dscp: int = 0, ready: Callable[[], None] | None = None) -> None:
    """Send `rate` datagrams/s to (to, port) over `flows` sockets, marked `dscp`, and receive on
    (bind, port) for `duration` seconds or until `stop()`, then keep receiving for `linger` s;
    write out.sent / out.recv. `ready` is called once the sockets are bound, before anything is
    sent (a caller starting two peers holds both there until both can receive)."""
    fam = _family(bind)
    rx = socket.socket(fam, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
    rx.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    rx.bind((bind, port))
    rx.setblocking(False)
    tx = [sender(fam, bind, dscp) for _ in range(flows)]
    if ready is not None:
        ready()
    sel = selectors.DefaultSelector()
    sel.register(rx, selectors.EVENT_READ)
    sent, got = Record.empty(), Record.empty()
    interval = 1.0 / rate
    pad = b"\0" * (PAYLOAD_BYTES - HEADER.size)
    start = time.monotonic()
    seq = 0
    while (now := time.monotonic()) - start < duration and not stop():
        due = int((now - start) / interval) + 1
        # Too far behind (descheduled): skip the rest; skipped numbers were never sent.
        seq = max(seq, due - MAX_BURST)
        while seq < due:
            t = time.time_ns()
            # no route right now (OSError): the datagram is lost like any other
            with contextlib.suppress(OSError):
                tx[seq % flows].sendto(HEADER.pack(seq, t) + pad, (to, port))
            sent.seq.append(seq)
            sent.ns.append(t)
            seq += 1
        wait = start + seq * interval - time.monotonic()
        if sel.select(max(0.0, wait)):
            _recv_all(rx, got)
    end = time.monotonic() + linger
    while time.monotonic() < end:
        if sel.select(0.05):
            _recv_all(rx, got)
    sent.save(out.with_suffix(".sent"))
    got.save(out.with_suffix(".recv"))


def main(argv: list[str] | None = None) -> None:
    """`python -m crosszone_lab.workload.udp_probe --bind A --to B ...` (run inside a namespace)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bind", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--port", type=int, default=9998)
    ap.add_argument("--rate", type=float, default=5000.0)
    ap.add_argument("--flows", type=int, default=64)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dscp", type=int, default=0,
                    help="DSCP of the datagrams sent (0 to 63; ECN bits stay 0)")
    ap.add_argument("--wait-go", action="store_true",
                    help="once bound, print 'ready' and send nothing until a line on stdin")
    a = ap.parse_args(argv)
    if a.rate <= 0 or a.flows <= 0 or a.duration <= 0:
        ap.error("--rate, --flows and --duration must be positive")
    if not 0 <= a.dscp <= 63:
        ap.error(f"--dscp {a.dscp}: must be 0 to 63")
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stopped.append(signum))

    def ready() -> None:
        print("ready", flush=True)
        sys.stdin.readline()

    run_peer(a.bind, a.port, a.to, a.rate, a.flows, a.duration, a.out, stop=lambda: bool(stopped),
             dscp=a.dscp, ready=ready if a.wait_go else None)
    print(json.dumps({"out": str(a.out)}))


if __name__ == "__main__":
    main()
