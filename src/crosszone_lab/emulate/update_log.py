"""When the routers received a migration step's BGP updates, from FRR's own log.

A step's `converge_ms` runs from the first command to the gateways until both routers' kernels
hold the new weights. Two things make it up: FRR on the gateways re-sending the routes (after
`soft out`, its announce timer: 100 ms), and the routers taking the update in (bgpd's work queue,
50 ms; zebra's, 10 ms; then the kernel). To show which is which in the same run, the benchmark
turns on `debug bgp updates in` on both routers' bgpd and reads back, for each step, when the
last route that changed arrived: everything after it is the routers' own convergence.

A changed route is a `rcvd PREFIX` line (or a withdrawal) that FRR did not log as a duplicate:
after `soft out` a gateway re-sends every route, and only those whose attributes changed (the
link bandwidth of the step) are news to the router. With `debug zebra kernel` the routers' zebra
also logs when it wrote each route to the kernel (`RTM_NEWROUTE`): the step's last write is when
the kernel got the weights, timed by the router itself rather than by the benchmark's poll
(which runs beside the workload and sees the change a little later).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from crosszone_lab.emulate.frr import frr_dir

_LINE = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) BGP: \[[^\]]*\] (\S+) rcvd (.*)$")
_PREFIX = re.compile(r"^(UPDATE about )?([0-9a-fA-F.:]+/\d+) IPv[46] unicast")
_WRITE = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) ZEBRA: \[[^\]]*\] "
                    r"netlink_route_multipath_msg_encode: RTM_(NEW|DEL)ROUTE (\S+) ")


#: daemon -> what it logs: bgpd every received update, zebra every route it writes
DEBUGS = {"bgpd": "debug bgp updates in", "zebra": "debug zebra kernel"}


def debug_on(ns: str, daemon: str = "bgpd") -> list[str]:
    """Commands for `daemon` of router `ns` that log what DEBUGS says, with its time."""
    return ["configure terminal", f"log file {frr_dir(ns) / 'frr.log'} debugging", "end",
            DEBUGS[daemon]]


def debug_off(ns: str, daemon: str = "bgpd") -> list[str]:
    """The commands that undo debug_on (the emulator's usual informational log)."""
    return [f"no {DEBUGS[daemon]}", "configure terminal",
            f"log file {frr_dir(ns) / 'frr.log'} informational", "end"]


def changed_routes(log_text: str) -> list[tuple[float, str, str]]:
    """(epoch seconds, peer, prefix) of every received route that was news, in log order.
    FRR writes local time: read back as local time, so the epoch matches time.time()."""
    out = []
    for line in log_text.splitlines():
        m = _LINE.match(line)
        if m is None or "duplicate ignored" in m.group(3):
            continue
        p = _PREFIX.match(m.group(3))
        if p is None:  # "rcvd UPDATE w/ attr", End-of-RIB, ...: not a route
            continue
        t = datetime.strptime(m.group(1), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        out.append((t, m.group(2), p.group(2)))
    return out


def kernel_writes(log_text: str) -> list[tuple[float, str]]:
    """(epoch seconds, prefix) of every route zebra wrote to (or deleted from) the kernel."""
    out = []
    for line in log_text.splitlines():
        m = _WRITE.match(line)
        if m is not None:
            t = datetime.strptime(m.group(1), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            out.append((t, m.group(3)))
    return out


def _logs(namespaces: Iterable[str]) -> list[str]:
    texts = []
    for ns in namespaces:
        try:
            texts.append((Path(frr_dir(ns)) / "frr.log").read_text())
        except OSError:
            continue
    return texts


def read_times(namespaces: Iterable[str]) -> tuple[list[float], list[float]]:
    """(times of every changed route the routers `namespaces` received, times of every route
    their zebra wrote to the kernel), each sorted; each log is read once."""
    texts = _logs(namespaces)
    return (sorted(t for text in texts for t, _peer, _prefix in changed_routes(text)),
            sorted(t for text in texts for t, _prefix in kernel_writes(text)))


def last_change(times: list[float], t0: float, t1: float) -> float | None:
    """The last of `times` within [t0, t1], or None."""
    inside = [t for t in times if t0 <= t <= t1]
    return inside[-1] if inside else None
