"""`crosszone bench failover`: what a gateway failure costs, to the packet, on the emulator.

For each gateway kind and event (emulate/failures.py), several trials. In each, a
sequence-numbered UDP probe (workload/udp_probe.py) runs between a compute endpoint and a storage
node in both directions and both families; the bench injects the event into one gateway of the
active kind, holds it, repairs it, waits until both routers' kernel routes hold every gateway
again, and stops the probe. Meanwhile it records, on one clock (CLOCK_REALTIME):

- every change of the announced routes in both routers' kernels (`ip -ts monitor route`: the
  netlink notifications zebra's writes cause),
- every BGP session going down in the routers' FRR logs (`%ADJCHANGE ... Down`, with the reason:
  `BFD down received`, a notification, a closed connection),

and from the probe the datagrams lost, the longest run of lost ones in time (the loss window) and
when traffic came back. The failure's datagrams are those sent between injection and repair; the
repair's ("recovery": the gateway comes back) those sent after it.

Output: one JSON line per (kind, event) with medians and the worst over the trials; the per-trial
timeline goes to `--detail FILE` as JSON lines.
"""

from __future__ import annotations

import ipaddress
import json
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from crosszone_lab.emulate import deploy, failures, frr, legacy_gateway
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.stallwatch import Stall, StallWatch
from crosszone_lab.emulate.topology import Endpoint, Plan, StorageNode
from crosszone_lab.workload.udp_probe import Analysis, Record, analyse

PROBE_PORT = 9998
Emit = Callable[[str], None]


# ---- probe ----------------------------------------------------------------------------------


def facing_address(ep: Endpoint, family: int) -> str:
    """The address storage sees for endpoint `ep` (its VPC address mapped 1:1 into the VPC's
    storage-facing prefix)."""
    vpc = ep.vpc
    if family == 6:
        if vpc.prefix6 is None or vpc.storage_facing6 is None or ep.addr6 is None:
            raise ValueError(f"VPC {vpc.name} has no IPv6")
        off = int(ipaddress.IPv6Address(ep.addr6)) - int(vpc.prefix6.network_address)
        return str(ipaddress.IPv6Address(int(vpc.storage_facing6.network_address) + off))
    off = int(ipaddress.IPv4Address(ep.addr)) - int(vpc.prefix.network_address)
    return str(ipaddress.IPv4Address(int(vpc.storage_facing.network_address) + off))


@dataclass
class Probe:
    """Running probe peers: per stream (name), the sender's and the receiver's record files."""

    procs: list[subprocess.Popen[str]]
    streams: dict[str, tuple[Path, Path]]
    rate: float

    def go(self, timeout: float = 30.0) -> None:
        """Wait until every peer is bound and can receive, then let them all send: no
        datagram is sent to a peer still starting (on a busy box an interpreter takes a few
        hundred ms to start, and what the first peer sent meanwhile counted as lost)."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            assert proc.stdout is not None
            ready = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = proc.stdout.readline() if ready[0] else ""
            if line.strip() != "ready":
                self.kill()
                raise RuntimeError(f"probe peer did not start within {timeout:.0f} s: "
                                   f"{line.strip()!r}")
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, *exc: object) -> None:
        """Peers still running when the block ends (it raised before `stop`) are killed: they
        run outside the caller's process group, so nothing else would end them early."""
        if any(proc.poll() is None for proc in self.procs):
            self.kill()

    def kill(self) -> None:
        """Stop every peer at once, saving nothing."""
        for proc in self.procs:
            proc.kill()
            proc.wait()

    def stop(self) -> dict[str, tuple[Record, Record]]:
        """Stop sending, let the peers drain and save, and load what they recorded."""
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            _out, err = proc.communicate(timeout=60)
            if proc.returncode != 0:
                raise RuntimeError(f"probe peer failed: {err.strip()[-500:]}")
        return {name: (Record.load(tx), Record.load(rx))
                for name, (tx, rx) in self.streams.items()}


def start_probe(p: Plan, ep: Endpoint, node: StorageNode, rate: float, flows: int,
                workdir: Path, max_s: float = 120.0, dscp: int = 0) -> Probe:
    """One peer per (side, family): each sends `rate`/s over `flows` source ports to the other,
    its datagrams marked `dscp`."""
    procs: list[subprocess.Popen[str]] = []
    streams: dict[str, tuple[Path, Path]] = {}
    families = [4] + ([6] if ep.addr6 and node.addr6 else [])
    for fam in families:
        ep_addr = ep.addr6 if fam == 6 else ep.addr
        st_addr = node.addr6 if fam == 6 else node.addr
        sides = {"compute": (ep.ns, ep_addr, st_addr),
                 "storage": (node.ns, st_addr, facing_address(ep, fam))}
        for side, (ns, bind, to) in sides.items():
            out = workdir / f"{side}{fam}"
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", ns, sys.executable, "-m",
                 "crosszone_lab.workload.udp_probe",
                 "--bind", str(bind), "--to", str(to), "--port", str(PROBE_PORT),
                 "--rate", str(rate), "--flows", str(flows), "--duration", str(max_s),
                 "--out", str(out), "--dscp", str(dscp), "--wait-go"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                # out of the terminal's process group: Ctrl-C stops the benchmark, which then
                # stops the peers with SIGTERM and reads what they recorded (`stop`); `max_s`
                # bounds a peer whose benchmark died without stopping it
                start_new_session=True))
        streams[f"to_storage{fam}"] = (workdir / f"compute{fam}.sent",
                                       workdir / f"storage{fam}.recv")
        streams[f"to_compute{fam}"] = (workdir / f"storage{fam}.sent",
                                       workdir / f"compute{fam}.recv")
    probe = Probe(procs, streams, rate)
    probe.go()
    return probe


# ---- timeline sources -----------------------------------------------------------------------

_TS = re.compile(r"^\[(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)\]\s*(.*)$")
_FRR_TS = re.compile(r"^(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d+) .*%ADJCHANGE: neighbor (\S+?)\(.*"
                     r" Down (.*)$")


def _epoch_ns(stamp: str, fmt: str) -> int:
    # Both `ip -ts` and FRR print local time with microseconds.
    return int(datetime.strptime(stamp, fmt).timestamp() * 1e6) * 1000


def route_events(text: str, prefixes: list[str]) -> list[tuple[int, str]]:
    """(time ns, line) of each `ip -ts monitor route` notification about one of `prefixes`."""
    bare = {x.removesuffix("/32"): x for x in prefixes} | {x: x for x in prefixes}
    out = []
    for line in text.splitlines():
        m = _TS.match(line)
        if not m:
            continue
        words = m.group(2).split()
        if words and words[0] == "Deleted":
            words = words[1:]
        if words and words[0] in bare:
            out.append((_epoch_ns(m.group(1), "%Y-%m-%dT%H:%M:%S.%f"), m.group(2)))
    return out


def session_downs(log_text: str) -> list[tuple[int, str, str]]:
    """(time ns, neighbour, reason) of each BGP session that went down, from an FRR log."""
    out = []
    for line in log_text.splitlines():
        m = _FRR_TS.match(line)
        if m:
            out.append((_epoch_ns(m.group(1), "%Y/%m/%d %H:%M:%S.%f"), m.group(2),
                        m.group(3).strip()))
    return out


@contextmanager
def watch_routes(namespaces: list[str]) -> Iterator[dict[str, str]]:
    """`ip -ts monitor route` in each namespace for the block's duration; the yielded dict
    holds each namespace's notifications once the block has ended."""
    tmp = Path(tempfile.mkdtemp(prefix="czfailover-mon-"))
    files = {ns: tmp / f"{ns}.mon" for ns in namespaces}
    texts: dict[str, str] = {}
    procs = []
    try:
        for ns in namespaces:
            with files[ns].open("w") as out:
                procs.append(subprocess.Popen(["ip", "-ts", "-n", ns, "monitor", "route"],
                                              stdout=out, stderr=subprocess.DEVNULL))
        time.sleep(0.2)
        yield texts
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=10)
        texts.update({ns: f.read_text() for ns, f in files.items()})
        shutil.rmtree(tmp, ignore_errors=True)


class LogTail:
    """What an FRR log gained since this object was made."""

    def __init__(self, ns: str) -> None:
        self.path = frr.frr_dir(ns) / "frr.log"
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def read(self) -> str:
        """The text appended since construction."""
        with self.path.open("rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")


# ---- trials ---------------------------------------------------------------------------------


#: CPU stalls a trial's timeline lists (shorter ones are ordinary scheduling).
STALL_REPORT_MS = 50.0


@dataclass
class Trial:
    """The figures of one trial of one event."""

    kind: str
    event: str
    phase: str  # "failure" or "recovery"
    lost: int
    window_ms: float
    detect_ms: float | None
    fib_ms: float | None
    timeline: dict[str, object] = field(default_factory=dict)


def _ms(ns: int | None, t0: int) -> float | None:
    return None if ns is None else round((ns - t0) / 1e6, 2)


def _phase(kind: str, event: str, phase: str, streams: dict[str, tuple[Record, Record]],
           interval_ns: int, flows: int, since: int, until: int | None,
           routes: list[tuple[str, int]], downs: list[tuple[int, str, str]],
           stalls: Sequence[Stall]) -> Trial:
    per: dict[str, Analysis] = {name: analyse(tx, rx, interval_ns, flows, since, until)
                                for name, (tx, rx) in streams.items()}
    in_phase = [(ns, t) for ns, t in routes if t >= since and (until is None or t < until)]
    downs_in = [d for d in downs if d[0] >= since and (until is None or d[0] < until)]
    first_route = min((t for _ns, t in in_phase), default=None)
    first_down = min((t for t, _n, _r in downs_in), default=None)
    detect = min((t for t in (first_route, first_down) if t is not None), default=None)
    last_route = max((t for _ns, t in in_phase), default=None)
    timeline: dict[str, object] = {
        "at_epoch_s": round(since / 1e9, 6),  # the injection (or repair), to match daemons' logs
        "session_down_ms": [[_ms(t, since), n, r] for t, n, r in downs_in],
        # CPUs that ran no real-time thread for a while (stallwatch): [cpu, ended at, for ms]
        "cpu_stalls": [[x.cpu, _ms(x.end_ns, since), round(x.gap_ms, 1)] for x in stalls
                       if x.end_ns >= since and (until is None or x.end_ns < until)],
        "route_changed_ms": {ns: [_ms(t, since) for n2, t in in_phase if n2 == ns]
                             for ns in sorted({ns for ns, _t in in_phase})},
        "streams": {name: a.to_json() | {
            "restored_ms": _ms(a.longest.restored_ns, since) if a.longest else None,
            "gap_starts_ms": _ms(a.longest.start_ns, since) if a.longest else None}
            for name, a in per.items()},
    }
    return Trial(kind, event, phase, lost=sum(a.lost for a in per.values()),
                 window_ms=max((a.longest.window_ms for a in per.values() if a.longest),
                               default=0.0),
                 detect_ms=_ms(detect, since), fib_ms=_ms(last_route, since), timeline=timeline)


@dataclass
class Bench:
    """The deployment under test and the probe's settings."""

    dep: deploy.Deployment
    drop_obj: Path
    rate: float = 6000.0
    flows: int = 64
    hold_s: float = 1.5
    settle_s: float = 0.8

    def _route_namespaces(self) -> list[str]:
        return [self.dep.plan.compute_router_ns, self.dep.plan.storage_router_ns]

    def trial(self, kind: str, event: str) -> list[Trial]:
        """One trial of `event` on the first gateway of `kind`: its failure and its recovery."""
        dep, p = self.dep, self.dep.plan
        gw = p.gateways_of(kind)[0]
        ev = failures.event(p, gw, event, self.drop_obj)
        prefixes = [x for _ns, x in dep.fib_targets()]
        tails = [LogTail(ns) for ns in self._route_namespaces()]
        workdir = Path(tempfile.mkdtemp(prefix="czfailover-"))
        try:
            with StallWatch() as watch, watch_routes(self._route_namespaces()) as monitors, \
                    start_probe(p, p.endpoints[0], p.storage_nodes[0], self.rate, self.flows,
                                workdir) as probe:
                time.sleep(self.settle_s)
                t_fail = time.time_ns()
                dep.ex.apply(ev.inject)
                time.sleep(self.hold_s)
                t_repair = time.time_ns()
                dep.ex.apply(ev.repair)
                dep.wait_sessions(timeout=60)
                dep.wait_routes(kind, st.load(), timeout=60)
                time.sleep(self.settle_s)
                streams = probe.stop()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        routes = [(ns, t) for ns in self._route_namespaces()
                  for t, _line in route_events(monitors.get(ns, ""), prefixes)]
        downs = [d for tail in tails for d in session_downs(tail.read())]
        interval = int(1e9 / self.rate)
        stalls = [x for x in watch.stalls if x.gap_ms >= STALL_REPORT_MS]
        return [
            _phase(kind, event, "failure", streams, interval, self.flows, t_fail, t_repair,
                   routes, downs, stalls),
            _phase(kind, event, "recovery", streams, interval, self.flows, t_repair, None,
                   routes, downs, stalls),
        ]


def summarise(kind: str, event: str, trials: list[Trial]) -> dict[str, object]:
    """The issue's summary line for one (kind, event)."""
    def med(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 2) if xs else None

    return {
        "kind": kind, "event": event, "trials": len(trials),
        "lost_median": med([t.lost for t in trials]),
        "loss_window_ms_median": med([t.window_ms for t in trials]),
        "loss_window_ms_worst": round(max((t.window_ms for t in trials), default=0.0), 2),
        "detect_ms_median": med([t.detect_ms for t in trials if t.detect_ms is not None]),
        "fib_ms_median": med([t.fib_ms for t in trials if t.fib_ms is not None]),
    }


#: The legacy baseline as a careful operator configures it (legacy_gateway.floating_route_ops).
LEGACY_CAREFUL = "legacy-careful"


@contextmanager
def configured(dep: deploy.Deployment, kind: str) -> Iterator[str]:
    """The gateway kind to fail for `kind`; `legacy-careful` adds the floating static routes to
    every legacy gateway for the block's duration."""
    if kind != LEGACY_CAREFUL:
        yield kind
        return
    gws = dep.plan.gateways_of("legacy")
    for gw in gws:
        dep.ex.apply(legacy_gateway.floating_route_ops(dep.plan, gw, True))
    try:
        yield "legacy"
    finally:
        for gw in gws:
            dep.ex.apply(legacy_gateway.floating_route_ops(dep.plan, gw, False))


def run(b: Bench, kinds: list[str], events: list[str], trials: int, emit: Emit,
        detail: Emit | None = None) -> None:
    """Every (kind, event) `trials` times; one summary line each, recovery rows last per kind."""
    for kind in kinds:
        with configured(b.dep, kind) as gw_kind:
            _run_kind(b, kind, gw_kind, events, trials, emit, detail)


def _run_kind(b: Bench, kind: str, gw_kind: str, events: list[str], trials: int, emit: Emit,
              detail: Emit | None) -> None:
    b.dep.switch(gw_kind, log=lambda _s: None)
    recovery: list[Trial] = []
    for event in events:
        failed: list[Trial] = []
        for n in range(trials):
            fail, rec = b.trial(gw_kind, event)
            failed.append(fail)
            recovery.append(rec)
            if detail:
                for t in (fail, rec):
                    detail(json.dumps({"kind": kind, "event": event, "phase": t.phase,
                                       "trial": n, "lost": t.lost,
                                       "loss_window_ms": round(t.window_ms, 2),
                                       "detect_ms": t.detect_ms, "fib_ms": t.fib_ms,
                                       **t.timeline}))
        emit(json.dumps(summarise(kind, event, failed)))
    if recovery:
        emit(json.dumps(summarise(kind, "recovery", recovery)))


# ---- planned switches: false BFD flaps --------------------------------------------------------


def run_switches(b: Bench, count: int, targets: tuple[str, ...], emit: Emit,
                 cli: list[str], step: Emit | None = None) -> dict[str, object]:
    """`count` planned `crosszone emulate switch` runs (each its own CLI process, as an operator
    runs it) alternating over `targets`, under the probe; every BGP session that went down on
    any router or gateway meanwhile is a false flap (nothing failed)."""
    p = b.dep.plan
    namespaces = [p.compute_router_ns, p.storage_router_ns] + [g.ns for g in p.gateways]
    tails = [LogTail(ns) for ns in namespaces]
    workdir = Path(tempfile.mkdtemp(prefix="czswitch-"))
    took: list[float] = []
    flapped: list[int] = []
    with StallWatch() as watch:
        try:
            with start_probe(p, p.endpoints[0], p.storage_nodes[0], b.rate, b.flows, workdir,
                             max_s=count * 60.0) as probe:
                time.sleep(b.settle_s)
                t0 = time.time_ns()
                interrupted = False
                try:
                    for n in range(count):
                        seen = sum(len(session_downs(t.read())) for t in tails)
                        start = time.monotonic()
                        res = subprocess.run(
                            [*cli, "emulate", "switch", "--to", targets[n % len(targets)]],
                            capture_output=True, text=True, check=False)
                        took.append(time.monotonic() - start)
                        if res.returncode != 0:
                            raise RuntimeError(f"switch {n} failed: {res.stderr.strip()[-500:]}")
                        if sum(len(session_downs(t.read())) for t in tails) > seen:
                            flapped.append(n)
                        if step:
                            step(f"switch {n + 1}/{count}: {len(flapped)} with a session down")
                except KeyboardInterrupt:
                    # stopped (Ctrl-C, or SIGTERM from a time limit): report the switches so far
                    interrupted = True
                time.sleep(b.settle_s)
                streams = probe.stop()
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    downs = [d for t in tails for d in session_downs(t.read())]
    bfd = p.spec.bfd
    # A receiver that ran nothing for (detection - one interval) misses its last packet's
    # deadline whatever it does; a smaller stall cannot explain a session going down.
    excuse_ms = bfd.interval_ms * (bfd.multiplier - 1)
    cpus = frr.bfd_cpus()
    unexplained = [d for d in downs if watch.explaining(d[0], excuse_ms, cpus) is None]
    interval = int(1e9 / b.rate)
    per = {name: analyse(tx, rx, interval, b.flows, t0) for name, (tx, rx) in streams.items()}
    line: dict[str, object] = {
        "switches": len(took), "targets": list(targets), "interrupted": interrupted,
        "switches_with_session_down": len(flapped),
        "sessions_down": len(downs),
        "down_reasons": sorted({r for _t, _n, r in downs}),
        # sessions down with no CPU stall of the detection time next to them: the emulation's
        # own flaps (a stall that long takes any user-space BFD down)
        "sessions_down_unexplained": len(unexplained),
        "cpu_stall_ms_worst": round(watch.worst_ms(), 1),
        "cpu_stalls_over_excuse": [s.to_json() for s in watch.stalls
                                   if s.gap_ms >= excuse_ms and s.cpu in cpus],
        "lost": sum(a.lost for a in per.values()),
        "sent": sum(a.sent for a in per.values()),
        "loss_window_ms_worst": round(max((a.longest.window_ms for a in per.values()
                                           if a.longest), default=0.0), 2),
        "switch_s_median": round(statistics.median(took), 3) if took else None,
        "load_avg_1m": round(_loadavg(), 2),
    }
    emit(json.dumps(line))
    return line


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])
