"""`crosszone bench migrate`: a whole migration under load, measured to the datagram.

On the migration topology (examples/migrate.yaml) the benchmark runs, all at once:

- the training workload on every production endpoint of every host (range reads, checkpoint
  writes, small requests), its failed requests attributed to the second they were seen;
- a sequence-numbered UDP probe, `--pps` datagrams per second per family over `--flows` flows
  per family, IPv4 and IPv6, from a compute endpoint to a storage node and back, every lost
  datagram attributed to the step during which it was sent, by direction;
- a migration legacy -> crosszone (canary, the steps, finish: drain and retire), then the way
  back, crosszone -> legacy, by the same engine and driver as `crosszone migrate`.

One JSON line per step: `{"migration", "step", "weight_new", "lost", "lost_to_storage",
"lost_to_compute", "failed_requests", "max_gap_ms", "converge_ms", "kernel_converge_ms",
"driver", "applied_ms", "share", "share_unit", "announce_ms", "update_rcvd_ms",
"after_update_ms"}`. The driver is the product's (`driver: "agents"`: the emulated crosszone
gateways' agents own their routing): converge_ms is the product's own figure (every agent
applied the step and the new gateways' share of the forwarded traffic reached its weight,
migrate/agent_driver.py) and kernel_converge_ms the emulator's independent one: from the same
start until both routers' kernels hold the step's weights (netlink), which no operator can read
on real routers. announce_ms is the part spent sending the commands (writing the routing
objects and calling the legacy adapter), update_rcvd_ms is when the routers received the last
route the step changed (FRR's `debug bgp updates in`, turned on for the run:
emulate/update_log.py), written_ms when their zebra last wrote a route to the kernel (`debug
zebra kernel`), and after_update_ms = written_ms - update_rcvd_ms, the routers' own
convergence, timed by them. Then a summary line with the totals,
the TCP resets counted in every endpoint and storage namespace, and the conditions.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from crosszone.abi.objects import ROOT
from crosszone.linux import netns
from crosszone.migrate import engine as eng
from crosszone.migrate.agent_driver import DriverError
from crosszone.migrate.plan import GUARD_DOCS, Plan
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import Store
from crosszone_lab.bench.failover import STALL_REPORT_MS, start_probe
from crosszone_lab.bench.migrate_chart import Sampler, draw
from crosszone_lab.emulate import deploy, topology, update_log
from crosszone_lab.emulate.migration import (
    EmulatedAgentDriver,
    MigrationDriverError,
    agents_manage_routing,
    emulated_agent_driver,
)
from crosszone_lab.emulate.stallwatch import StallWatch
from crosszone_lab.emulate.topology import workload_targets
from crosszone_lab.emulate.vty import Vty, VtyError
from crosszone_lab.workload import runner
from crosszone_lab.workload.runner import Targets
from crosszone_lab.workload.udp_probe import Record, analyse

TOPOLOGY = ROOT / "examples" / "migrate.yaml"
STEP_EVENTS = ("step", "rollback_step", "rollback")


def _tcp_resets(namespaces: list[str]) -> int:
    """Tcp EstabResets + OutRsts summed over namespaces (/proc/net/snmp)."""
    total = 0
    for ns in namespaces:
        out = subprocess.run(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp"],
                             capture_output=True, text=True, check=False).stdout.splitlines()
        for i, line in enumerate(out):
            if line.startswith("Tcp: RtoAlgorithm") and i + 1 < len(out):
                row = dict(zip(line.split(), out[i + 1].split(), strict=False))
                total += int(row.get("EstabResets", 0)) + int(row.get("OutRsts", 0))
    return total


#: The most a move may take beyond its dwell (the agents' applies, the legacy actions, a
#: traffic share that is not reached waits its 30 s timeout): the workload and the probe must
#: outlast every move or the shares read nothing; they are stopped when the migrations end.
MOVE_S = 45.0


def _estimate_s(plan: Plan, move_s: float = MOVE_S) -> float:
    """How long one migration takes at most (dwells, plus a tick and a move per phase, and the
    standby and retirement moves)."""
    return (plan.canary_dwell_s + move_s + len(plan.steps) * (plan.dwell_s + move_s)
            + plan.dwell_s + 8 + 2 * move_s)


def _migrate(store: Store, driver: EmulatedAgentDriver, plan: Plan,
             log: Callable[[str], None]
             ) -> tuple[str, list[dict[str, Any]]]:
    """One migration to the end (finish included): its final state and its history. A guard
    that rolled it back is a result, not an error: the lines say where and why."""
    e = eng.Engine(store, driver, tick_s=1.0, log=log)
    if isinstance(driver, EmulatedAgentDriver):
        driver.beat = e.heartbeat  # a move that waits for agents is not a dead runner
    try:
        e.start(plan)
        st = e.run(stop=lambda s: s.state in eng.FINAL or s.state in ("shifted", "paused"))
        if st.state == "shifted":
            e.apply("finish", reason="bench")
            # the drain ends when a whole dwell saw no packet on the source gateways; a run
            # whose source keeps forwarding is rolled back after ten dwells, not waited for
            st = e.run(timeout=10 * plan.dwell_s + 30)
            if st.state == "draining":
                e.apply("rollback", reason="bench: the source gateways still forwarded after "
                                           f"{10 * plan.dwell_s + 30:.0f} s of drain")
        elif st.state == "paused":
            e.apply("rollback", reason=f"bench: {st.reason}")
    except KeyboardInterrupt:
        # Ctrl-C or a time limit's SIGTERM: the steps done so far are reported; the weights stay
        # where they are (the deployment goes down after, unless --keep)
        log(f"interrupted in {e.state.state} at {e.state.weight_new}% on the new gateways")
        return "interrupted", list(e.events)
    except (DriverError, MigrationDriverError, VtyError) as exc:
        # a move the driver could not make (a legacy adapter's command that timed out on the
        # loaded box, in the first runs through the product's driver) ends this migration as
        # a result with its reason, and the lines of the steps done so far are still printed
        log(f"driver failed in {e.state.state} at {e.state.weight_new}%: {exc}")
        return f"driver failed: {exc}", list(e.events)
    return e.state.state, list(e.events)


def lost_in(records: dict[str, tuple[Record, Record]], interval_ns: int, flows: int,
            t0: float, t1: float) -> dict[str, Any]:
    """What the probe lost of the datagrams sent in [t0, t1) (seconds), per direction."""
    out = {"lost": 0, "lost_to_storage": 0, "lost_to_compute": 0, "max_gap_ms": 0.0}
    until = None if t1 == float("inf") else int(t1 * 1e9)
    for name, (sent, recv) in records.items():
        a = analyse(sent, recv, interval_ns, flows, int(t0 * 1e9), until)
        out["lost"] += a.lost
        out["lost_to_storage" if name.startswith("to_storage") else "lost_to_compute"] += a.lost
        if a.longest is not None:
            out["max_gap_ms"] = max(out["max_gap_ms"], round(a.longest.window_ms, 1))
    return out


def loss_seconds(records: dict[str, tuple[Record, Record]], t_start: float
                 ) -> list[list[float]]:
    """[second after t_start, datagrams lost] for every second of the probe that lost any, all
    streams together, by send time (negative: before the first migration began)."""
    per: dict[int, int] = {}
    for sent, recv in records.values():
        got = set(recv.seq)
        for seq, ns in zip(sent.seq, sent.ns, strict=True):
            if seq not in got:
                k = math.floor(ns / 1e9 - t_start)
                per[k] = per.get(k, 0) + 1
    return [[k, n] for k, n in sorted(per.items())]


def step_lines(events: list[dict[str, Any]], moves: list[dict[str, float]],
               records: dict[str, tuple[Record, Record]], interval_ns: int, flows: int,
               errors: list[tuple[float, int]], label: str,
               changes: list[float] | None = None,
               writes: list[float] | None = None) -> list[dict[str, Any]]:
    """One line per weight move: what was lost and failed from its announcement to the next.
    With the routers' logs (update_log: `changes`, when they received a changed route; `writes`,
    when zebra wrote a route to the kernel), the move's convergence is split, each time from
    the first command and within the move's convergence: `update_rcvd_ms` (the last changed
    route received), `written_ms` (the last kernel write) and `after_update_ms`, the routers'
    own part from the one to the other."""
    marks = [ev for ev in events if ev["event"] in STEP_EVENTS]
    ends = [ev["t"] for ev in events if ev["event"] in STEP_EVENTS + ("finished",)][1:]
    out = []

    def last_ms(times: list[float] | None, t0: float, conv: float | None) -> float | None:
        if times is None or conv is None:
            return None
        last = update_log.last_change(times, t0, t0 + conv / 1000)
        return None if last is None else round((last - t0) * 1000, 1)

    for i, ev in enumerate(marks):
        move = moves[i] if i < len(moves) else {}
        t0 = move.get("t", ev["t"])
        t1 = ends[i] if i < len(ends) else float("inf")
        conv = move.get("converge_ms")
        kernel = move.get("kernel_ms")
        rcvd, written = last_ms(changes, t0, kernel), last_ms(writes, t0, kernel)
        out.append({"migration": label, "step": ev["step"], "weight_new": ev["weight_new"],
                    **lost_in(records, interval_ns, flows, t0, t1),
                    "failed_requests": sum(n for t, n in errors if t0 <= t < t1),
                    "converge_ms": conv,
                    "kernel_converge_ms": kernel,
                    "driver": "agents",
                    # when the last agent had applied the step, and the new gateways' share of
                    # the forwarded traffic the driver read (None: none read), in share_unit
                    "applied_ms": move.get("applied_ms"), "share": move.get("share"),
                    "share_unit": move.get("share_unit"),
                    "announce_ms": move.get("announce_ms"),
                    "update_rcvd_ms": rcvd,
                    "written_ms": written,
                    "after_update_ms": None if rcvd is None or written is None
                    else round(written - rcvd, 1)})
    return out


def _router_debug(p: Any, on: bool) -> None:
    """Log (or stop logging) every update the two routers receive and every route their zebra
    writes to the kernel (update_log)."""
    for ns in (p.compute_router_ns, p.storage_router_ns):
        for daemon in update_log.DEBUGS:
            try:
                v = Vty(ns, daemon)
                try:
                    v.run(update_log.debug_on(ns, daemon) if on
                          else update_log.debug_off(ns, daemon), False)
                finally:
                    v.close()
            except (VtyError, OSError):
                continue


def _plans(canary: str, steps: tuple[int, ...], dwell_s: float, latency_factor: float
           ) -> list[Plan]:
    """legacy -> crosszone, then back, with `canary` as the canary VPC."""
    limits = {k: v[0] for k, v in GUARD_DOCS.items()} | {
        "canary_errors": 0.0, "canary_latency_factor": latency_factor,
        "small_p99_factor": latency_factor}
    return [Plan(source=a, target=b, canary=canary, steps=steps, dwell_s=dwell_s,
                 canary_dwell_s=dwell_s, limits=limits)
            for a, b in (("legacy", "crosszone"), ("crosszone", "legacy"))]


def _production_targets(p: Any, canary: str) -> Targets:
    """The workload's targets on every endpoint outside the canary VPC."""
    prod = {e.ns for e in p.endpoints if e.vpc.name != canary}
    full = workload_targets(p)
    return Targets(endpoints=tuple(w for w in full.endpoints if w.ns in prod),
                   servers=full.servers, shards=full.shards,
                   shard_size_mib=full.shard_size_mib, checkpoint_max_mib=full.checkpoint_max_mib)


class _Errors:
    """Failed requests by the time the workload's progress lines reported them."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []
        self._last: dict[str, int] = {}

    def on_progress(self, name: str, doc: dict[str, Any]) -> None:
        """runner.run's on_progress: the growth of a worker's error count, timed."""
        n = int(doc.get("errors", 0))
        if n > self._last.get(name, 0):
            self.seen.append((time.time(), n - self._last.get(name, 0)))
        self._last[name] = n


@dataclass
class _Migrations:
    """What the migrations left: per migration its plan, engine events and weight moves."""

    histories: list[tuple[Plan, list[dict[str, Any]], list[dict[str, float]]]] = field(
        default_factory=list)
    outcomes: list[str] = field(default_factory=list)
    interrupted: bool = False


def _driver(store: Store, dep: Any, console: Console) -> EmulatedAgentDriver:
    """The product's driver over the emulation, as `crosszone migrate` on the emulator."""
    if not agents_manage_routing(dep):
        raise MigrationDriverError("the emulated crosszone gateways' agents do not all "
                                   "manage their routing")
    return emulated_agent_driver(dep, store, lambda m: console.print(m))


def _run_migrations(store: Store, dep: Any, plans: list[Plan], console: Console,
                    out: _Migrations) -> None:
    """Each migration in turn until one does not finish (filled into `out` as they go)."""
    for pl in plans:
        driver = _driver(store, dep, console)
        try:
            dep.wait_sessions(timeout=60)  # parity refuses a start while a session is down
            final, events = _migrate(store, driver, pl, log=lambda m: console.print(m))
        except KeyboardInterrupt:
            final, events = "interrupted", []  # before the migration started
        finally:
            driver.close()
        out.histories.append((pl, events, driver.moves))
        out.outcomes.append(f"{pl.source}->{pl.target}: {final}")
        if final != "finished":
            out.interrupted = final == "interrupted"
            return


def run_bench(steps: tuple[int, ...], dwell_s: float, pps: float, flows: int,
              emit: Callable[[str], None], topology_file: Path = TOPOLOGY,
              latency_factor: float = 10.0, chart: Path | None = None) -> dict[str, Any]:
    """Bring the deployment up, run both migrations under load, emit the lines; returns the
    summary (and draws the weight/traffic chart to `chart`)."""
    console = Console(stderr=True)
    spec = topology.load(topology_file)
    dep = deploy.Deployment(topology.plan(spec), netns.Executor(), topology_path=str(topology_file))
    dep.up(log=lambda m: console.print(f"[cyan]up[/cyan] {m}"))
    # Attaching the fast paths (hundreds of MiB of tables zeroed) can hold a CPU long enough
    # for a BFD session to go down and come back: parity would refuse the start meanwhile.
    dep.wait_sessions(timeout=60)
    p = dep.plan
    _router_debug(p, True)
    canary = spec.vpcs[-1].name
    plans = _plans(canary, steps, dwell_s, latency_factor)
    targets = _production_targets(p, canary)
    prod = [e for e in p.endpoints if e.vpc.name != canary]
    namespaces = [e.ns for e in prod] + [n.ns for n in p.storage_nodes]
    resets0 = _tcp_resets(namespaces)
    errors = _Errors()

    # ---- run: the probe, the workload, the stall watch, the migrations
    duration = sum(_estimate_s(pl) for pl in plans) + 15
    workdir = Path(tempfile.mkdtemp(prefix="czmigrate-probe-"))
    udp = start_probe(p, prod[0], p.storage_nodes[0], pps, flows, workdir,
                      max_s=duration + 120, dscp=spec.priority_dscp)
    result: dict[str, Any] = {}
    stop_workload = threading.Event()
    wl = threading.Thread(target=lambda: result.setdefault("w", runner.run(
        targets, duration=duration, console=Console(file=open(os.devnull, "w")),  # noqa: SIM115
        on_progress=errors.on_progress, stop=stop_workload)), daemon=True)
    wl.start()
    done = _Migrations()
    try:
        time.sleep(3.0)  # the workload's connections are up before anything moves
    except KeyboardInterrupt:
        done.interrupted = True
    # the migration's state: a file of the bench's own (the product's driver writes the
    # routing objects where the agents read them, the emulation's controller store)
    store = SqliteStore(str(topology.RUN_DIR / "bench-migrate.db"), poll_s=0.01)
    t_start = time.time()
    sampler = Sampler(dep)
    sampler.start()
    stack = contextlib.ExitStack()
    # CPUs that ran no real-time thread for a while: what explains a BFD flap
    watch = stack.enter_context(StallWatch())
    try:
        if not done.interrupted:
            _run_migrations(store, dep, plans, console, done)
        total_s = time.time() - t_start
        if done.interrupted:
            stop_workload.set()  # its workers are killed: what they failed is in `errors`
            wl.join(timeout=30)
        else:
            wl.join(timeout=duration + 60)
    finally:
        stack.close()
        sampler.halt.set()
        records = udp.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        routers = [p.compute_router_ns, p.storage_router_ns]
        changes, writes = update_log.read_times(routers)
        _router_debug(p, False)

    # ---- report: the chart, a line per step, the summary
    if chart is not None:
        draw(sampler.rows, [(m["t"], f"{pl.source}->{pl.target}", int(m["weight_new"]))
                            for pl, _e, moves in done.histories for m in moves], t_start, chart)
    interval_ns = int(1e9 / pps)
    lines: list[dict[str, Any]] = []
    for pl, events, moves in done.histories:
        for line in step_lines(events, moves, records, interval_ns, flows, errors.seen,
                               f"{pl.source}->{pl.target}", changes, writes):
            lines.append(line)
            emit(json.dumps(line))
    w = None if done.interrupted else result.get("w")
    total = lost_in(records, interval_ns, flows, 0.0, float("inf"))
    after = [x["after_update_ms"] for x in lines if x["after_update_ms"] is not None]
    summary = {
        "summary": True, "migrations": done.outcomes, "interrupted": done.interrupted, **total,
        # interrupted: the workers were killed before their results, so the failures their
        # progress lines reported (the workload's own summary is then null)
        "failed_requests": w.errors if w is not None
        else sum(n for _t, n in errors.seen) if done.interrupted else None,
        "total_s": round(total_s, 1),
        "tcp_resets": _tcp_resets(namespaces) - resets0,
        # where the losses were, steps or not (the step lines cover only the weight moves)
        "lost_by_second": loss_seconds(records, t_start),
        "converge_ms_max": max((x["converge_ms"] or 0) for x in lines) if lines else None,
        # the routers' share: from the last changed route they received to the last kernel write
        "after_update_ms_max": max(after) if after else None,
        "after_update_ms_median": statistics.median(after) if after else None,
        # [cpu, ended (s after the start), for ms] of every stall of 50 ms or more
        "cpu_stalls": [[x.cpu, round(x.end_ns / 1e9 - t_start, 2), round(x.gap_ms, 1)]
                       for x in watch.stalls if x.gap_ms >= STALL_REPORT_MS],
        "probe": {"sent": sum(len(sent.seq) for sent, _r in records.values()),
                  "pps_per_family_each_way": pps, "flows_per_family_each_way": flows,
                  "streams": sorted(records)},
        "workload": w.to_json() if w is not None else None,
        "conditions": {"kernel": platform.release(), "cpus": os.cpu_count(),
                       "load1": round(os.getloadavg()[0], 2), "steps": list(steps),
                       "dwell_s": dwell_s, "latency_factor_limit": latency_factor,
                       "topology": topology_file.name},
    }
    emit(json.dumps(summary))
    return summary
