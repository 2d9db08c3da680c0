"""The side-by-side demo: the same training-storage workload through legacy, then crosszone.

`run_demo(console)`: emulate up, workload through the legacy gateways, BGP switch to the
crosszone gateways, the same workload again, a comparison table, emulate down (always).

What "gateway CPU" means here: a veth hands a packet to the receiving namespace in softirq
context on whichever CPU sent it, so no per-namespace process owns the gateway's forwarding work
(the XDP program and the kernel's VXLAN/nftables path both run there). We therefore read the
box-wide softirq time from /proc/stat over each run (ksoftirqd's time is part of it: it only runs
softirqs). Everything else in the two runs is identical (hosts, routers, storage, the same
workload), so the difference between the rows is the gateways'. The total non-idle CPU per GB is
shown too, for scale.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from crosszone.emulate import crosszone_gateway as xgw
from crosszone.emulate import deploy, legacy_gateway, netns, topology
from crosszone.emulate import state as st
from crosszone.workload import runner

DEMO_DURATION_S = 15.0
USER_HZ = 100  # /proc/stat unit (sysconf(_SC_CLK_TCK) is 100 on Linux)


@dataclass(frozen=True)
class CpuSample:
    softirq_s: float
    busy_s: float


def cpu_sample(stat_text: str | None = None) -> CpuSample:
    """Softirq and total non-idle CPU seconds since boot, summed over CPUs (/proc/stat)."""
    text = stat_text if stat_text is not None else Path("/proc/stat").read_text()
    fields = [int(x) for x in text.splitlines()[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    steal = fields[7] if len(fields) > 7 else 0
    busy = user + nice + system + irq + softirq + steal
    return CpuSample(softirq / USER_HZ, busy / USER_HZ)


def gateway_drops(ex: netns.Executor, p: topology.Plan, kind: topology.GatewayKind) -> int:
    """Packets dropped by gateways of `kind`: interface drops + nftables or fast-path drops."""
    total = 0
    for gw in p.gateways_of(kind):
        out = ex.output(["ip", "-n", gw.ns, "-s", "-j", "link", "show"], check=False)
        try:
            for link in json.loads(out or "[]"):
                stats = link.get("stats64", {})
                total += int(stats.get("rx", {}).get("dropped", 0))
                total += int(stats.get("tx", {}).get("dropped", 0))
        except (json.JSONDecodeError, AttributeError):
            pass
        if kind == "legacy":
            total += legacy_gateway.dropped_packets(ex.output(
                ["ip", "netns", "exec", gw.ns, "nft", "-j", "list", "counter", "ip", "czgw",
                 "dropped"], check=False))
        else:
            total += xgw.dropped_from_stats(xgw.read_stats(gw))
    return total


@dataclass
class Row:
    gateway: str
    result: runner.WorkloadResult
    cpu: CpuSample
    drops: int

    def gb(self) -> float:
        return self.result.total_bytes / 1e9


def measured_run(console: Console, ex: netns.Executor, p: topology.Plan, kind: str,
                 duration: float, sample: Callable[[], CpuSample] = cpu_sample) -> Row:
    """One workload run with CPU and drop accounting around it."""
    k: topology.GatewayKind = "legacy" if kind == "legacy" else "crosszone"
    drops0 = gateway_drops(ex, p, k)
    c0 = sample()
    res = runner.run(p, duration=duration, console=console)
    c1 = sample()
    drops = gateway_drops(ex, p, k) - drops0
    console.print(runner.summary_table(res, title=f"workload through {kind} gateways"))
    return Row(kind, res, CpuSample(c1.softirq_s - c0.softirq_s, c1.busy_s - c0.busy_s), drops)


def comparison_table(rows: list[Row]) -> Table:
    """The side-by-side table."""
    t = Table(title="legacy vs crosszone, same workload, same box")
    for col in ("gateways", "loader Gbps", "checkpoint Gbps", "small p99 ms",
                "softirq CPU s/GB", "total CPU s/GB", "drops", "errors"):
        t.add_column(col, justify="right")
    for r in rows:
        j = r.result.to_json()
        gb = max(r.gb(), 1e-9)
        t.add_row(r.gateway, f"{j['loader']['gbps']:.2f}", f"{j['checkpoint']['gbps']:.2f}",
                  f"{j['small']['p99_ms']:.2f}", f"{r.cpu.softirq_s / gb:.2f}",
                  f"{r.cpu.busy_s / gb:.2f}", str(r.drops), str(r.result.errors))
    return t


def run_demo(console: Console, topology_file: Path = topology.DEFAULT_TOPOLOGY,
             duration: float = DEMO_DURATION_S) -> int:
    """The whole demo; 0 on success. Always takes the deployment down."""
    spec = topology.load(topology_file)
    ex = netns.Executor()
    dep = deploy.Deployment(topology.plan(spec), ex, topology_path=str(topology_file))
    rows: list[Row] = []
    t0 = time.monotonic()
    try:
        console.rule("emulate up")
        dep.up(log=lambda m: console.print(f"[cyan]up[/cyan] {m}"))
        if spec.active != "legacy":
            dep.switch("legacy", log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
        console.rule("workload through the legacy gateways")
        rows.append(measured_run(console, ex, dep.plan, "legacy", duration))
        state = st.load()
        if state and any(state.fastpath.values()):
            console.rule("BGP switch to the crosszone gateways")
            dep.switch("crosszone", log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
            console.rule("workload through the crosszone gateways")
            rows.append(measured_run(console, ex, dep.plan, "crosszone", duration))
        else:
            console.print("[yellow]crosszone fast path not attached "
                          "(`crosszone fastpath attach` missing): crosszone row skipped[/yellow]")
        console.print(comparison_table(rows))
        console.print("CPU: box-wide /proc/stat over each run; only the gateways differ "
                      "between rows (see docs/emulate.md).")
        ok = all(r.result.errors == 0 for r in rows)
        return 0 if ok else 1
    except (deploy.DeployError, netns.CommandFailed) as exc:
        console.print(f"[red]demo failed:[/red] {exc}")
        return 1
    finally:
        console.rule("emulate down")
        deploy.down(ex, log=lambda m: console.print(f"[cyan]down[/cyan] {m}"))
        console.print(f"demo took {time.monotonic() - t0:.0f} s")
