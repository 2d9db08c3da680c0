"""The fast path's watchdog: the program attached to every gateway port is the one the agent
loaded, checked every 20 ms; otherwise the gateway fails closed (issue 25, point 1).

A gray failure: with the XDP program detached from a port (or replaced, by a drop-all or
anything else), BGP and BFD stay up, because their packets cross the kernel, and the routers
keep sending the gateway its share, which it black-holes (3,553 datagrams in the issue's
measurement). Nothing in routing notices, so the agent looks itself.

What is compared: the id of the program pinned at `<pin_dir>/prog` (the one `ensure_attached`
loaded; read again when a port shows another id, so an upgrade that re-pins is followed) with
the id each gateway port has attached in native mode (`bpf_xdp_query`), and no generic-mode
program beside it. Any other answer (nothing: 0, another id, the port gone) is a mismatch.

How: polling, in a thread of its own that enters the gateway's network namespace once (setns
is per thread). One query is one netlink RTM_GETLINK (about 0.2 ms through libbpf here), so a
20 ms period costs about 1 % of a core per port and bounds detection at 20 ms plus a query.
The kernel (6.18) does send an RTM_NEWLINK on attach, detach and replace on veth, but that
comes from veth's own feature update and is no interface contract for every driver: a missed
notification would leave the gateway black-holing, a poll cannot miss.

What follows a mismatch (`on_change(report)`, agent.Agent.fastpath_changed): the agent turns
the kernel's IPv4 forwarding off on the gateway's ports (`PortForwarding`), takes the gateway out
of routing, reports health `failed-closed` with the port, what it has and the expected id, and
writes its status at once; a match again brings it back (forwarding as it was, then routing).

Why the forwarding too: a port without the fast path hands transit packets to the kernel, which
forwards what it can. That is what keeps a gray failure gray: a router's data-plane check through
the gateway (BFD echo, or the emulated routers' fast reroute, whose ICMP echoes cross the
gateway) still passes, so only the BGP shutdown takes the gateway out, in 78 to 116 ms of the
routers' bgpd and zebra. With the ports forwarding nothing the check fails like it does for a
drop-all, and the routers move the traffic in their detection time (12 to 15 ms measured for a
drop-all on the emulator). The gateway's own BGP, BFD, ARP and ND are local traffic, untouched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("crosszone.agent.fastpath")

#: Period of the check: detection within this plus one query (issue 25 allows 100 ms of loss
#: from the fault to the routers dropping the gateway).
PERIOD = 0.02
#: What `attached` holds besides program ids (0: nothing attached).
GENERIC_BESIDE, GONE, NO_PIN = -1, -2, -3
_SAY = {0: "nothing attached", GENERIC_BESIDE: "a generic-mode XDP program beside the native one",
        GONE: "no such interface"}


@dataclass(frozen=True)
class Report:
    """One check: whether every port has the expected program, and what each has."""

    ok: bool
    expected: int
    attached: dict[str, int] = field(default_factory=dict)
    since: float = 0.0  # wall time of the last change of `ok`

    def problem(self) -> str:
        """What is wrong, naming the ports (empty when ok)."""
        bad = [f"{iface} has {_SAY.get(pid, f'program id {pid}')}"
               for iface, pid in sorted(self.attached.items()) if pid != self.expected]
        if self.ok:
            return ""
        want = ("no program pinned to expect" if self.expected == NO_PIN
                else f"expected program id {self.expected}")
        return f"fast path not attached: {'; '.join(bad)} ({want})"

    def to_json(self) -> dict[str, Any]:
        """The status's `fastpath` object."""
        return {"ok": self.ok, "expected": self.expected, "attached": dict(self.attached),
                "since": self.since}


def attached_id(ifname: str) -> int:
    """The program a port runs for the gateway: its native-mode id, or -1 when a generic-mode
    program sits beside it (also mismatching); 0 when nothing; -2 when the port is gone. Call
    inside the gateway's namespace."""
    import socket

    from crosszone.fastpath.libbpf import xdp_query

    try:
        ifindex = socket.if_nametoindex(ifname)
    except OSError:
        return GONE
    drv, skb = xdp_query(ifindex)
    return drv if not skb else GENERIC_BESIDE


class PortForwarding:
    """The kernel's IPv4 forwarding of the gateway's ports (`/proc/sys/net/ipv4/conf/<port>/
    forwarding`, read in the calling thread's network namespace): off while the gateway is
    failed closed, then each port back to what it was. IPv6 has no per-port switch that stops
    forwarding (a port's `forwarding` there only makes it a host or a router)."""

    def __init__(self, root: Path = Path("/proc/sys/net/ipv4/conf")) -> None:
        self.root = root
        self.saved: dict[str, str] = {}

    def off(self, ports: list[str]) -> str:
        """Forwarding off on `ports`; what was done, for the status message."""
        done, failed = [], []
        for port in sorted(ports):
            path = self.root / port / "forwarding"
            try:
                old = path.read_text().strip()
                path.write_text("0")
            except OSError as exc:
                failed.append(f"{port} ({exc.strerror or exc})")
                continue
            self.saved.setdefault(port, old)
            done.append(port)
        said = f"kernel forwarding off on {', '.join(done)}" if done else ""
        if failed:
            said += ("; " if said else "") + f"kernel forwarding not changed on {', '.join(failed)}"
        return said

    def restore(self) -> str:
        """Every port turned off back to what it was; what could not be, for the log."""
        failed = []
        for port, old in sorted(self.saved.items()):
            try:
                (self.root / port / "forwarding").write_text(old)
            except OSError as exc:
                failed.append(f"{port} ({exc.strerror or exc})")
        self.saved.clear()
        return f"kernel forwarding not restored on {', '.join(failed)}" if failed else ""


class FastPathGuard:
    """Checks the ports every `period` seconds in a thread (or once per `check()` call, with
    everything injected: query(ifname) -> attached id, expected() -> the pinned id, interfaces()
    -> the gateway's ports); calls on_change(report) when `ok` flips."""

    def __init__(self, interfaces: Callable[[], list[str]], expected: Callable[[], int],
                 on_change: Callable[[Report], None],
                 query: Callable[[str], int] = attached_id, netns: str | None = None,
                 period: float = PERIOD, wall: Callable[[], float] = time.time) -> None:
        self.interfaces, self.expected_of, self.on_change = interfaces, expected, on_change
        self.query, self.netns, self.period, self.wall = query, netns, period, wall
        self.expected: int | None = None
        self.report: Report | None = None
        self.checks = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> Report | None:
        """One comparison; calls on_change when the outcome differs from the last one. None
        while there is no port to check (before the agent's first reconcile)."""
        ifaces = self.interfaces()
        if not ifaces:
            return self.report
        if self.expected is None:
            self.expected = self._expected()
        attached = {i: self.query(i) for i in ifaces}
        if any(v != self.expected for v in attached.values()):
            # the pin may have moved to a new program (an upgrade): read it once more
            self.expected = self._expected()
        ok = bool(attached) and all(v == self.expected for v in attached.values())
        self.checks += 1
        last = self.report
        flipped = last is None or last.ok != ok
        since = self.wall() if flipped or last is None else last.since
        report = Report(ok, self.expected, attached, since)
        self.report = report
        # the first report too (it tells the agent the check runs), and a failed port that
        # now has something else (the status says what is there)
        if flipped or last is None or (last.attached, last.expected) != (attached,
                                                                          self.expected):
            self.on_change(report)
        return report

    def _expected(self) -> int:
        try:
            return self.expected_of()
        except OSError:
            return NO_PIN

    def start(self) -> None:
        """Check every `period` seconds in a daemon thread, inside `netns`."""
        self._thread = threading.Thread(target=self._run, name="fastpath-guard", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread (waits for the running check)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        from crosszone.linux.netns import in_netns

        with in_netns(self.netns):  # this thread only, for its whole life
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    self.check()
                except Exception:  # never end the watchdog: count, log, go on
                    self.errors += 1
                    if self.errors <= 3 or self.errors % 1000 == 0:
                        log.exception("fast path check failed (%d so far)", self.errors)
                self._stop.wait(max(0.0, self.period - (time.monotonic() - t0)))
