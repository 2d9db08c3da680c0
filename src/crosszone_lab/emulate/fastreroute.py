"""A router's fast reroute: drop a gateway from the kernel's multipath routes within ~25 ms.

Through FRR 8.4 a silent gateway costs BFD's detection time (150 ms at 30 ms x 5) plus about
70 ms from bgpd's and zebra's queues to the kernel (docs/emulate.md, "Failover"). Routers cut
that by checking the forwarding path themselves and moving traffic before the routing protocol
converges (precomputed backup paths, fast reroute). This daemon is the emulated router's: one
per router namespace, at real-time priority on bfdd's CPU, below bfdd's.

- **What it checks.** Every `interval` it sends one ICMP echo per gateway link, addressed to the
  *other* router's address on that gateway's far link (`--peer g3=10.10.3.1`): the echo crosses
  the gateway, the far router's kernel answers, and the answer crosses the gateway back (a
  /32 route on each router pins both ways to that gateway). No user-space daemon answers, and
  one echo proves both of the gateway's links and its forwarding in both directions. Echoes
  carry the policy's `small_dscp`, the highest-priority class of the emulated queues, as BFD
  would be in the network-control class.
- **When a gateway is down.** `multiplier` echoes in a row unanswered over at least
  `multiplier` intervals, while another gateway still answers (a witness: when every echo path
  goes quiet at once, the router's own packet processing is late, which on a busy box happens
  when the kernel defers it to ksoftirqd at normal priority): its next hops leave every
  multipath route of the namespace (IPv4 and IPv6), every changed route in one netlink
  datagram (`emulate/multipath_routes.py`). A route's last next hop stays (nothing to move to).
- **Not fooled by its own stalls.** Every queued answer is read before any decision, an answer
  counts from when it is read, and only echoes actually sent count as unanswered: a process
  that did not run for a while (a frozen CPU, a long system call elsewhere) neither sent echoes
  nor missed answers meanwhile, so a stall of any length never takes a gateway down on its own.
  (FRR's bfdd runs its expired timers before it reads its sockets, which is how a stall became a
  false BFD Down.)
- **Coming back.** A gateway is put back only after `restore` of unbroken answers, and only in
  the routes whose next hops zebra still has for it (FRR's RIB, read over zebra's vty): when
  BGP has withdrawn the gateway meanwhile, zebra's own route is already right and nothing is
  added. While a gateway is out, a route zebra rewrites with it is corrected again.

`python -m crosszone_lab.emulate.fastreroute --peer g1=10.10.1.1 ... [--daemon --pidfile F]`; each
transition is logged with its wall-clock time (`%Y-%m-%dT%H:%M:%S.%f`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from crosszone_lab.emulate.multipath_routes import Routes, drain, route_monitor

ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0
#: Route rewrites by zebra while a gateway is out are corrected at most this often: each
#: correction reads every route back, and zebra writes dozens while BGP reconverges.
REDROP_S = 0.02


@dataclass
class Peer:
    """One gateway link: the device toward the gateway and the far router's address."""

    dev: str
    target: str
    ident: int
    last_reply: float = 0.0
    unanswered: int = 0
    down: bool = False
    answering_since: float | None = None


@dataclass
class Detector:
    """The decisions, without sockets or routes (time is passed in)."""

    peers: list[Peer]
    interval_s: float
    multiplier: int
    restore_s: float
    next_tick: float = 0.0
    late_ticks: int = 0  # ticks that came over an interval late (the process did not run)

    def start(self, now: float) -> None:
        for p in self.peers:
            p.last_reply = now
        self.next_tick = now

    def reply(self, ident: int, now: float) -> None:
        """An echo of `ident` came back."""
        for p in self.peers:
            if p.ident == ident:
                p.last_reply, p.unanswered = now, 0
                if p.down and p.answering_since is None:
                    p.answering_since = now

    def tick(self, now: float) -> list[tuple[str, Peer]]:
        """Called at (or after) `next_tick`, replies already read: the transitions, then the
        echoes count as sent."""
        out: list[tuple[str, Peer]] = []
        if now - self.next_tick > self.interval_s:
            self.late_ticks += 1
        window = self.multiplier * self.interval_s
        # A witness: another gateway still in that answered within the window. When none did,
        # every echo path went quiet at once, which on a busy box is this router's own packet
        # processing deferred (ksoftirqd runs at normal priority), not gateways failing; and
        # were they all down, there would be nothing to move the traffic to anyway.
        answered = {id(q) for q in self.peers if not q.down and now - q.last_reply < window}
        for p in self.peers:
            if (not p.down and p.unanswered >= self.multiplier and now - p.last_reply >= window
                    and answered - {id(p)}):
                p.down, p.answering_since = True, None
                out.append(("down", p))
            elif p.down:
                if p.unanswered >= 2:
                    p.answering_since = None  # answers must be unbroken
                elif p.answering_since is not None and now - p.answering_since >= self.restore_s:
                    p.down, p.answering_since = False, None
                    out.append(("up", p))
        for p in self.peers:
            p.unanswered += 1
        self.next_tick = max(self.next_tick + self.interval_s, now)
        return out


# ---- ICMP --------------------------------------------------------------------------------------


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def echo_request(ident: int, seq: int) -> bytes:
    body = b"crosszone-fast-reroute"
    head = struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, 0, ident, seq & 0xFFFF)
    return struct.pack("!BBHHH", ICMP_ECHO_REQUEST, 0, _checksum(head + body), ident,
                       seq & 0xFFFF) + body


def parse_reply(packet: bytes) -> int | None:
    """The identifier of an ICMP echo reply in a raw IPv4 packet (None for anything else)."""
    if len(packet) < 20:
        return None
    ihl = (packet[0] & 0x0F) * 4
    if len(packet) < ihl + 8 or packet[ihl] != ICMP_ECHO_REPLY:
        return None
    return int(struct.unpack("!H", packet[ihl + 4:ihl + 6])[0])


# ---- routes ------------------------------------------------------------------------------------


def zebra_hops(ns: str) -> dict[str, set[str]]:
    """Route key -> interfaces of zebra's selected next hops (IPv4 and IPv6), from its vty."""
    from crosszone_lab.emulate.vty import Vty

    out: dict[str, set[str]] = {}
    v = Vty(ns, "zebra")
    try:
        for family, cmd in ((socket.AF_INET, "show ip route json"),
                            (socket.AF_INET6, "show ipv6 route json")):
            for prefix, entries in json.loads(v.command(cmd) or "{}").items():
                net, _, plen = prefix.partition("/")
                devs = {nh.get("interfaceName", "") for e in entries if e.get("selected")
                        for nh in e.get("nexthops", []) if nh.get("active")}
                out[f"{family}/{net}/{plen}"] = devs
    finally:
        v.close()
    return out


# ---- the daemon --------------------------------------------------------------------------------


def _in_rib(rib: dict[str, set[str]], dev: str) -> Callable[[str], bool]:
    return lambda key: dev in rib.get(key, set())


def _log(msg: str) -> None:
    print(f"[{datetime.now().isoformat(timespec='microseconds')}] {msg}", flush=True)


def run(peers: list[Peer], interval_s: float, multiplier: int, restore_s: float, dscp: int,
        ns: str | None) -> None:
    routes = Routes()
    index = {p.dev: routes.ifindex(p.dev) for p in peers}
    # zebra writing a route back while a gateway is out: corrected when the kernel says so
    monitor = route_monitor()
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, dscp << 2)
    sock.setblocking(False)
    echoes = [(echo_request(p.ident, 0), (p.target, 0)) for p in peers]
    det = Detector(peers, interval_s, multiplier, restore_s)
    det.start(time.monotonic())
    routes.warm()
    rewritten, last_redrop = False, 0.0  # zebra wrote routes; when we last corrected them
    pending: list[Peer] = []  # up, waiting for the RIB check
    checking: threading.Thread | None = None
    rib: dict[str, set[str]] = {}
    _log(f"watching {', '.join(f'{p.dev} via {p.target}' for p in peers)} every "
         f"{interval_s * 1000:g} ms, down after {multiplier} unanswered")

    def read_rib() -> None:
        nonlocal rib
        try:
            rib = zebra_hops(ns) if ns else {}
        except Exception as exc:  # logged; the gateway stays out until zebra answers
            _log(f"cannot read zebra's routes: {exc}")
            rib = {}

    while True:
        timeout = max(0.0, det.next_tick - time.monotonic())
        readable, _, _ = select.select([sock, monitor], [], [], timeout)
        now = time.monotonic()
        while True:  # every queued answer before any decision
            try:
                ident = parse_reply(sock.recv(2048))
            except BlockingIOError:
                break
            if ident is not None:
                det.reply(ident, now)
        if monitor in readable:
            drain(monitor)  # what changed is read back below, at most every REDROP_S
            routes.invalidate()
            rewritten = True
        if rewritten and now - last_redrop >= REDROP_S:
            rewritten, last_redrop = False, now
            for p in peers:
                if p.down and routes.drop(index[p.dev]):
                    _log(f"{p.dev} written back into a route while out: taken out again")
            routes.warm()
        if now < det.next_tick:
            continue
        for what, p in det.tick(now):
            if what == "down":
                n = routes.drop(index[p.dev])
                _log(f"{p.dev} down ({multiplier} echoes unanswered, last answer "
                     f"{(now - p.last_reply) * 1000:.1f} ms ago): out of {n} routes in "
                     f"{(time.monotonic() - now) * 1000:.1f} ms")
            else:
                pending.append(p)
        if pending and checking is None:
            checking = threading.Thread(target=read_rib, daemon=True)
            checking.start()
        elif checking is not None and not checking.is_alive():
            checking = None
            for p in pending:
                if not p.down:
                    n = routes.restore(index[p.dev], _in_rib(rib, p.dev))
                    _log(f"{p.dev} answering again: back in {n} routes zebra still has it in")
            pending = []
        if routes.errors:
            _log("the kernel refused: " + ", ".join(f"{k} ({e})" for k, e in routes.errors))
            routes.errors.clear()
        for packet, to in echoes:
            with contextlib.suppress(OSError):  # no route (link down): unanswered
                sock.sendto(packet, to)


def _daemonize(pidfile: Path, log: Path) -> None:
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    pidfile.write_text(f"{os.getpid()}\n")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", action="append", required=True, metavar="DEV=ADDR",
                    help="a gateway link and the far router's address behind that gateway")
    ap.add_argument("--interval-ms", type=float, default=5.0)
    ap.add_argument("--multiplier", type=int, default=4)
    ap.add_argument("--restore-ms", type=float, default=500.0)
    ap.add_argument("--dscp", type=int, default=0)
    ap.add_argument("--ns", help="the namespace's name, for zebra's vty (without it nothing is "
                    "put back: BGP does it when the gateway returns)")
    ap.add_argument("--daemon", action="store_true")
    ap.add_argument("--pidfile", type=Path)
    ap.add_argument("--log", type=Path)
    a = ap.parse_args(argv)
    peers = []
    for n, spec in enumerate(a.peer, start=1):
        dev, sep, addr = spec.partition("=")
        if not sep or not dev or not addr:
            ap.error(f"--peer {spec!r}: DEV=ADDR")
        try:
            socket.inet_aton(addr)
        except OSError:
            ap.error(f"--peer {spec!r}: {addr!r} is not an IPv4 address")
        peers.append(Peer(dev, addr, 0xC200 + n))
    if a.interval_ms <= 0 or a.multiplier < 2 or not 0 <= a.dscp <= 63:
        ap.error("--interval-ms > 0, --multiplier >= 2, --dscp 0..63")
    if a.daemon:
        if not a.pidfile or not a.log:
            ap.error("--daemon needs --pidfile and --log")
        _daemonize(a.pidfile, a.log)
    try:
        run(peers, a.interval_ms / 1000, a.multiplier, a.restore_ms / 1000, a.dscp, a.ns)
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
