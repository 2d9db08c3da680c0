"""The side-by-side demo: the same training-storage workload through legacy, then crosszone.

`run_demo(console)`: emulate up, workload through the legacy gateways, BGP switch to the
crosszone gateways, the same workload again, a comparison table; then rate-limited priority
queues on the bottleneck ports and the workload with the traffic policy off and on (small
requests' latency, `policy_rows`); emulate down (always).

What "gateway CPU" means here: a veth hands a packet to the receiving namespace in softirq
context on whichever CPU sent it, so no per-namespace process owns the gateway's forwarding work
(the XDP program and the kernel's VXLAN/nftables path both run there). We read each CPU's
softirq time from /proc/stat over each run (ksoftirqd's time is part of it: it only runs
softirqs) and subtract an idle baseline (the deployment up, no workload: BFD, BGP, timers)
measured just before, scaled to the run's length. Everything else in the two runs is identical
(hosts, routers, storage, the same workload, the same seeds and duration), and the other kind's
gateways are idle during a run (the baseline covers them), so per GB moved the difference
between the rows is the gateways'. Total non-idle CPU per GB is shown too, for scale: on a 2-core
box the workload saturates the CPUs, so throughput and CPU/GB are the two sides of one budget.

Drops come from each kind's own counters: legacy = nftables `dropped` counters + the gateways'
interface drops; crosszone = the fast path's drop reasons + the gateways' interface drops. Drops
anywhere else in the emulated network (veth backlogs and XDP rings overflowing under TCP bursts)
are counted apart: they are congestion in the emulation, the same for both kinds' traffic.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crosszone.linux import netns
from crosszone_lab.emulate import deploy, kinds, queues, topology
from crosszone_lab.emulate import policy as pol
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.workload import runner, worker

DEMO_DURATION_S = 20.0
# The traffic policy's rows: the queues and policy values of this topology on the running
# deployment (docs/policy.md), small requests of the first POLICY_WARMUP_S seconds untimed.
POLICY_TOPOLOGY = topology.ROOT / "examples" / "two-zone-policy.yaml"
POLICY_WARMUP_S = 3.0
# The policy rows' checkpoint bursts may fill this share of the shaped storage ports at most.
POLICY_CHECKPOINT_LOAD = 0.85
DEMO_LOADERS = 2
IDLE_BASELINE_S = 4.0
USER_HZ = 100  # /proc/stat unit (sysconf(_SC_CLK_TCK) is 100 on Linux)


@dataclass(frozen=True)
class CpuSample:
    softirq_s: float
    busy_s: float
    per_cpu_softirq_s: tuple[float, ...] = ()


def cpu_sample(stat_text: str | None = None) -> CpuSample:
    """Softirq and total non-idle CPU seconds since boot, summed over CPUs and per CPU."""
    text = stat_text if stat_text is not None else Path("/proc/stat").read_text()
    lines = text.splitlines()
    fields = [int(x) for x in lines[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    busy = user + nice + system + irq + softirq + steal
    per_cpu = tuple(int(ln.split()[7]) / USER_HZ for ln in lines[1:]
                    if ln.startswith("cpu") and ln[3:4].isdigit())
    return CpuSample(softirq / USER_HZ, busy / USER_HZ, per_cpu)


def cpu_delta(a: CpuSample, b: CpuSample) -> CpuSample:
    """b - a."""
    return CpuSample(b.softirq_s - a.softirq_s, b.busy_s - a.busy_s,
                     tuple(y - x for x, y in zip(a.per_cpu_softirq_s, b.per_cpu_softirq_s,
                                                 strict=False)))


def link_drops(links_json: str, devs: set[str] | None = None) -> int:
    """Packets dropped by the interfaces of one namespace (`ip -d -s -j link show` output).

    The kernel shows a veth drop at both ends (tx at the sender, rx at its peer), so a veth
    counts only its tx drops: each lost packet once, at the end that could not hand it on
    (which is how a gateway's failed redirects stay the gateway's). Other devices count both.
    Output that is not a list of links with statistics raises DeployError: a probe that failed
    must never read as "no drops".
    """
    try:
        links = json.loads(links_json)
    except (json.JSONDecodeError, TypeError) as exc:
        raise DeployError(f"interface counters: not JSON ({exc}): {links_json[:80]!r}") from None
    if not isinstance(links, list) or not links:
        raise DeployError(f"interface counters: no links in {links_json[:80]!r}")
    total = 0
    for link in links:
        if devs is not None and isinstance(link, dict) and link.get("ifname") not in devs:
            continue
        try:
            stats = link["stats64"]
            if link.get("linkinfo", {}).get("info_kind") != "veth":
                total += int(stats["rx"]["dropped"])
            total += int(stats["tx"]["dropped"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise DeployError(f"interface counters: link without drop statistics ({exc!r}): "
                              f"{str(link)[:80]}") from None
    return total


def namespace_drops(ex: netns.Executor, ns: str, devs: set[str] | None = None) -> int:
    """Packets dropped by the interfaces of namespace `ns` (only `devs`, if given).

    Raises (netns.CommandFailed, DeployError) when the counters cannot be read."""
    return link_drops(ex.output(["ip", "-n", ns, "-d", "-s", "-j", "link", "show"]), devs)


def gateway_drops(ex: netns.Executor, p: topology.Plan, kind: str) -> dict[str, int]:
    """Drops by gateways of `kind`, by cause: interface drops and the kind's own counters
    (nftables for legacy, fast-path drop reasons for crosszone)."""
    out: dict[str, int] = {"interfaces": 0}
    for gw in p.gateways_of(kind):
        out["interfaces"] += namespace_drops(ex, gw.ns)
        for cause, n in kinds.get(kind).drops(ex, gw).items():
            out[cause] = out.get(cause, 0) + n
    return out


def network_drops(ex: netns.Executor, p: topology.Plan) -> int:
    """Interface drops everywhere but the gateways (hosts, endpoints, routers, storage)."""
    gw_ns = {g.ns for g in p.gateways}
    return sum(namespace_drops(ex, ns) for ns in p.namespaces if ns not in gw_ns)


def _diff(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b) if b.get(k, 0) - a.get(k, 0)}


@dataclass
class Row:
    gateway: str
    result: runner.WorkloadResult
    cpu: CpuSample
    idle_softirq_s: float
    drops: dict[str, int]
    other_drops: int

    def gb(self) -> float:
        return self.result.total_bytes / 1e9

    @property
    def gateway_drops(self) -> int:
        return sum(self.drops.values())

    def to_json(self) -> dict[str, object]:
        gb = max(self.gb(), 1e-9)
        return {"gateway": self.gateway, "gb": round(self.gb(), 3),
                "workload": self.result.to_json(),
                "softirq_s": round(self.cpu.softirq_s, 2),
                "idle_softirq_s": round(self.idle_softirq_s, 2),
                "softirq_s_per_gb": round((self.cpu.softirq_s - self.idle_softirq_s) / gb, 2),
                "busy_s_per_gb": round(self.cpu.busy_s / gb, 2),
                "per_cpu_softirq_s": [round(x, 2) for x in self.cpu.per_cpu_softirq_s],
                "gateway_drops": self.drops, "other_drops": self.other_drops}


def idle_baseline(seconds: float, sample: Callable[[], CpuSample] = cpu_sample,
                  sleep: Callable[[float], None] = time.sleep) -> float:
    """Softirq CPU seconds per second with the deployment up and no workload."""
    a = sample()
    sleep(seconds)
    return max(0.0, cpu_delta(a, sample()).softirq_s / seconds)


def measured_run(console: Console, ex: netns.Executor, p: topology.Plan, kind: str,
                 duration: float, idle_rate: float,
                 sample: Callable[[], CpuSample] = cpu_sample) -> Row:
    """One workload run with CPU and drop accounting around it."""
    k = kinds.get(kind).name
    drops0, other0 = gateway_drops(ex, p, k), network_drops(ex, p)
    c0 = sample()
    t0 = time.monotonic()
    res = runner.run(topology.workload_targets(p), duration=duration, loaders=DEMO_LOADERS,
                     console=console)
    elapsed = time.monotonic() - t0
    c1 = sample()
    drops = _diff(drops0, gateway_drops(ex, p, k))
    other = network_drops(ex, p) - other0
    console.print(runner.summary_table(res, title=f"workload through {kind} gateways"))
    return Row(kind, res, cpu_delta(c0, c1), idle_rate * elapsed, drops, other)


def comparison_table(rows: list[Row]) -> Table:
    """The side-by-side table."""
    t = Table(title="legacy vs crosszone, same workload, same box")
    for col in ("gateways", "loader Gbps", "checkpoint Gbps", "small p99 ms", "GB moved",
                "gateway softirq s/GB", "box busy s/GB", "gateway drops", "other drops",
                "errors"):
        t.add_column(col, justify="right")
    for r in rows:
        j = r.to_json()
        w = r.result.to_json()
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r.drops.items())) or "0"
        t.add_row(r.gateway, f"{w['loader']['gbps']:.2f}", f"{w['checkpoint']['gbps']:.2f}",
                  f"{w['small']['p99_ms']:.1f}", f"{r.gb():.2f}", f"{j['softirq_s_per_gb']:.2f}",
                  f"{j['busy_s_per_gb']:.2f}", reasons, str(r.other_drops),
                  f"{r.result.errors}{' (baseline)' if r is rows[0] else ''}")
    return t


def print_comparison(console: Console, rows: list[Row], verbose: bool) -> None:
    """The comparison table; with `verbose`, each row's JSON document before it (the table
    says the same for a reader, and stays on screen)."""
    for r in rows if verbose else []:
        console.print_json(json.dumps(r.to_json()))
    console.print(comparison_table(rows))


def with_policy_queues(p: topology.Plan, source: topology.TopologySpec) -> topology.Plan:
    """`p` with the queues and the policy values of `source` (the policy off)."""
    spec = p.spec.model_copy(update={"queues": source.queues, "policy": source.policy})
    return pol.with_policy(topology.plan(spec), False)


def policy_table(kind: str, results: dict[str, runner.WorkloadResult]) -> Table:
    """Small-request latency and bulk goodput with the policy off and on."""
    t = Table(title=f"traffic policy through the {kind} gateways (queues: docs/policy.md)")
    for col in ("policy", "small p50 ms", "small p99 ms", "small p999 ms", "loader Gbps",
                "checkpoint Gbps", "errors"):
        t.add_column(col, justify="right")
    for setting, res in results.items():
        j = res.to_json()
        t.add_row(setting, f"{j['small']['p50_ms']:.1f}", f"{j['small']['p99_ms']:.1f}",
                  f"{j['small']['p999_ms']:.1f}", f"{j['loader']['gbps']:.3f}",
                  f"{j['checkpoint']['gbps']:.3f}", str(res.errors))
    off, on = results.get("off"), results.get("on")
    if off and on and on.percentile_us(0.99) > 0:
        t.caption = (f"small p50 {off.percentile_us(0.5) / on.percentile_us(0.5):.1f}x, "
                     f"p99 {off.percentile_us(0.99) / on.percentile_us(0.99):.1f}x better "
                     f"with the policy; loader goodput on/off "
                     f"{on.gbps(on.read_bytes) / max(off.gbps(off.read_bytes), 1e-9):.2f}")
    return t


def checkpoint_mbit(t: runner.Targets) -> float:
    """Checkpoint data every endpoint offers, Mbit/s (parts of `checkpoint_max_mib`, at most
    8 MiB, CKPT_PARALLEL of them every CKPT_INTERVAL_S: the workers' defaults)."""
    part = min(8, t.checkpoint_max_mib) * 8 * 1.048576
    return len(t.endpoints) * worker.CKPT_PARALLEL * part / worker.CKPT_INTERVAL_S


def policy_targets(p: topology.Plan) -> runner.Targets:
    """The workload of `p` with checkpoint parts whose bursts fit in the shaped storage ports:
    the largest whole MiB at which every endpoint's checkpoints need at most
    POLICY_CHECKPOINT_LOAD of them. Bursts beyond the ports' rate queue without end, and PUTs
    time out (the workers' 10 s): with the deployment's own 8 MiB parts, 24 timeouts per run
    (8 endpoints: 268 Mbit/s into 80); with the policy topology's 4 MiB, one (134 into 80)."""
    t = topology.workload_targets(p)
    q = p.spec.queues
    if q is None or "storage" not in q.links:
        return t
    room = POLICY_CHECKPOINT_LOAD * q.rate_mbit * len(p.storage_nodes)
    mib = max([m for m in range(1, 9) if checkpoint_mbit(
        dataclasses.replace(t, checkpoint_max_mib=m)) <= room] or [1])
    return dataclasses.replace(t, checkpoint_max_mib=min(mib, t.checkpoint_max_mib))


def policy_rows(console: Console, ex: netns.Executor, p: topology.Plan, kind: str,
                duration: float) -> dict[str, runner.WorkloadResult]:
    """Queues on the bottleneck ports, then the workload with the policy off and on."""
    p = with_policy_queues(p, topology.load(POLICY_TOPOLOGY))
    if p.spec.queues is None:
        raise DeployError(f"{POLICY_TOPOLOGY} has no `queues:`: the policy would act on nothing")
    console.print(f"queues: {p.spec.queues.rate_mbit} Mbit/s on {', '.join(p.spec.queues.links)}"
                  f" ports, strict priority by DSCP; elephant_bytes "
                  f"{p.spec.policy.elephant_bytes}")
    ex.apply(queues.plan_ops(p))
    results: dict[str, runner.WorkloadResult] = {}
    for setting in ("off", "on"):
        p = pol.set_policy(ex, p, setting == "on")
        results[setting] = runner.run(policy_targets(p), duration=duration,
                                      loaders=DEMO_LOADERS, console=console,
                                      warmup=POLICY_WARMUP_S, small_apart=True)
    console.print(policy_table(kind, results))
    return results


def verdict(rows: list[Row], baseline: str, expected: list[str]) -> tuple[int, list[str]]:
    """Exit code and notes of a demo: 0 unless a kind other than the baseline had an error or
    has no row. The baseline (legacy) is what crosszone is compared with: its errors are
    reported, in the table and here, and do not fail the demo."""
    notes: list[str] = []
    rc = 0
    seen = {r.gateway for r in rows}
    for kind in expected:
        if kind not in seen:
            rc = 1
            notes.append(f"[red]{kind}: no run (its gateways could not carry traffic)[/red]")
    for r in rows:
        if not r.result.errors:
            continue
        samples = "; ".join(r.result.error_samples[:3])
        if r.gateway == baseline:
            notes.append(f"[yellow]{r.gateway} (baseline): {r.result.errors} errors, reported, "
                         f"not failing the demo: {samples}[/yellow]")
        else:
            rc = 1
            notes.append(f"[red]{r.gateway}: {r.result.errors} errors: {samples}[/red]")
    return rc, notes


def run_demo(console: Console, topology_file: Path = topology.DEFAULT_TOPOLOGY,
             duration: float = DEMO_DURATION_S, verbose: bool = False) -> int:
    """The whole demo; 0 on success. Always takes the deployment down. `verbose` also prints
    each run's raw JSON document (the tables say the same, for a reader)."""
    spec = topology.load(topology_file)
    ex = netns.Executor()
    dep = deploy.Deployment(topology.plan(spec), ex, topology_path=str(topology_file))
    rows: list[Row] = []
    t0 = time.monotonic()
    try:
        console.rule("emulate up")
        dep.up(log=lambda m: console.print(f"[cyan]up[/cyan] {m}"))
        first = kinds.default()  # the baseline: the kind that needs no attach (legacy)
        if spec.active != first:
            dep.switch(first, log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
        console.rule(f"idle baseline ({IDLE_BASELINE_S:.0f} s, no workload)")
        idle = idle_baseline(IDLE_BASELINE_S)
        console.print(f"idle softirq: {idle:.3f} CPU s/s (BFD, BGP, timers)")
        console.rule(f"workload through the {first} gateways")
        rows.append(measured_run(console, ex, dep.plan, first, duration, idle))
        # Then every other kind that has gateways here, each after a BGP switch to it.
        for kind in kinds.names():
            if kind == first or not dep.plan.gateways_of(kind):
                continue
            state = st.load()
            if state and any(kinds.ready(g, state.fastpath) for g in dep.plan.gateways_of(kind)):
                console.rule(f"BGP switch to the {kind} gateways")
                dep.switch(kind, log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
                console.rule(f"workload through the {kind} gateways")
                rows.append(measured_run(console, ex, dep.plan, kind, duration, idle))
            else:
                console.print(f"[red]{kind} fast path not attached: no {kind} row[/red]")
        print_comparison(console, rows, verbose)
        console.print("gateway softirq s/GB: softirq CPU seconds over the run (all CPUs, "
                      "/proc/stat) minus the idle baseline, per GB moved; only the gateways "
                      "differ between rows. Drops: the kind's own counters (nftables / fast-path "
                      "reasons, gateway interfaces); other drops: veth queues elsewhere "
                      "(see docs/emulate.md).")
        console.print("What this shows: both kinds carry the same training traffic (two "
                      "tenants on one address space), and a BGP switch moved it "
                      "from one set to the other (the tests check that a switch loses not one "
                      "datagram). What one small box "
                      "cannot show is a gateway's speed: every namespace here (GPU-host "
                      "endpoints, both routers, all gateways, nginx) shares the same cores, so "
                      "the box bounds the throughput of both rows, and the kernel gateway's GRO "
                      "hands the routers fewer, larger packets, which the all-CPU figure credits "
                      "to it. Part 3 gives one gateway a core of its own.")
        expected = [k for k in kinds.names() if k != first and dep.plan.gateways_of(k)]
        rc, notes = verdict(rows, first, expected)
        last = rows[-1].gateway if rows else first
        console.rule(f"traffic policy off and on, through the {last} gateways")
        policy = policy_rows(console, ex, dep.plan, last, duration)
        if last != first and any(r.errors for r in policy.values()):
            rc = 1
            samples = "; ".join(e for r in policy.values() for e in r.error_samples[:2])
            notes.append(f"[red]{last}: errors in the policy runs: {samples}[/red]")
        for note in notes:
            console.print(note)
        return rc
    except (deploy.DeployError, netns.CommandFailed) as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
        return 1
    finally:
        console.rule("emulate down")
        deploy.down(ex, log=lambda m: console.print(f"[cyan]down[/cyan] {m}"))
        console.print(f"demo took {time.monotonic() - t0:.0f} s")
