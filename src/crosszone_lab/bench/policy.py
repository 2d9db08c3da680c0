"""`crosszone bench policy`: small requests next to bulk traffic with the traffic policy off and on.

One deployment (examples/two-zone-policy.yaml: bottleneck ports with priority queues), the same
mixed workload (range reads, checkpoint bursts, small requests; the same seeds every round)
through each gateway kind, the policy off and on in interleaved rounds (off/on, then on/off, so
that a drift of the box's load does not favour one setting). Off: nothing marked, every queue a
FIFO, plain ECMP; on: the gateways mark by flow size (crosszone: the fast path; legacy: nftables
with conntrack byte counters, its best).

One JSON line per round and setting, a summary per gateway kind (medians of the rounds), and a
`floor` line: small requests alone, no bulk traffic, on the same deployment. The floor is the
ceiling of what any policy can give here: if the policy's p99 is near the floor, what remains
is the box (CPU scheduling, the Python clients), not the queues. `cpu_busy` (the box's CPUs'
busy share over a round, /proc/stat, everything on the box included) says whether the CPU, not
a shaped port, was the bottleneck.

`reordered_pct`: reordering the TCP senders detected (TcpExt TCPSACKReorder + TCPTSReorder +
TCPRenoReorder: events, each a segment that arrived after later ones, not a loss) per 100
segments sent (TcpOutSegs), over the endpoints and the storage nodes: what a flowlet move or a
priority change inside a flow costs. (Out-of-order arrivals at the receivers, TCPOFOQueue,
would count every loss too: the segments behind a dropped one arrive "out of order".)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from crosszone.abi.objects import ROOT
from crosszone.linux import netns
from crosszone_lab.emulate import deploy, kinds, topology
from crosszone_lab.emulate import policy as pol
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.demo import CpuSample, cpu_delta, cpu_sample
from crosszone_lab.workload import runner

POLICY_TOPOLOGY = ROOT / "examples" / "two-zone-policy.yaml"
TARGET_P99_IMPROVEMENT = 5.0
TARGET_BULK_RATIO = 0.95
LOADERS = 2

Emit = Callable[[dict[str, Any]], None]


def _counters(text: str) -> dict[str, int]:
    """`Prefix: names` / `Prefix: values` line pairs of /proc/net/{snmp,netstat} as one dict."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        prefix, _, keys = names.partition(":")
        _, _, vals = values.partition(":")
        for k, v in zip(keys.split(), vals.split(), strict=False):
            if v.lstrip("-").isdigit():
                out[f"{prefix}{k}"] = int(v)
    return out


REORDER_COUNTERS = ("TcpExtTCPSACKReorder", "TcpExtTCPTSReorder", "TcpExtTCPRenoReorder")


def tcp_counters(ex: netns.Executor, namespaces: list[str]) -> tuple[int, int]:
    """(segments sent, reorderings detected) summed over `namespaces`."""
    segs = reordered = 0
    for ns in namespaces:
        c = _counters(ex.output(["ip", "netns", "exec", ns, "cat", "/proc/net/snmp",
                                 "/proc/net/netstat"]))
        segs += c.get("TcpOutSegs", 0)
        reordered += sum(c.get(k, 0) for k in REORDER_COUNTERS)
    return segs, reordered


def round_line(kind: str, setting: str, rnd: int, res: runner.WorkloadResult,
               segs: int, reordered: int, cpu_busy: float | None = None) -> dict[str, Any]:
    """The JSON line of one round (`cpu_busy`: the box's CPUs' busy share over the round)."""
    j = res.to_json()
    return {"gateway": kind, "policy": setting, "round": rnd, "cpu_busy": cpu_busy,
            "small_p50_ms": j["small"]["p50_ms"], "small_p99_ms": j["small"]["p99_ms"],
            "small_p999_ms": j["small"]["p999_ms"], "small_requests": len(res.small_lat_us),
            "bulk_gbps": j["loader"]["gbps"], "checkpoint_gbps": j["checkpoint"]["gbps"],
            "reordered_pct": round(100.0 * reordered / segs, 4) if segs else 0.0,
            "errors": res.errors}


def summary(kind: str, lines: list[dict[str, Any]], floor_p99: float | None) -> dict[str, Any]:
    """Medians of a kind's rounds per setting, the two ratios and whether they meet the targets."""
    def med(setting: str, key: str) -> float:
        vals = [ln[key] for ln in lines if ln["gateway"] == kind and ln["policy"] == setting]
        return float(statistics.median(vals)) if vals else 0.0

    off_p99, on_p99 = med("off", "small_p99_ms"), med("on", "small_p99_ms")
    off_bulk, on_bulk = med("off", "bulk_gbps"), med("on", "bulk_gbps")
    improvement = off_p99 / on_p99 if on_p99 > 0 else 0.0
    ratio = on_bulk / off_bulk if off_bulk > 0 else 0.0
    out: dict[str, Any] = {
        "summary": True, "gateway": kind,
        "small_p99_improvement": round(improvement, 2), "bulk_goodput_ratio": round(ratio, 3),
        "off_small_p99_ms": off_p99, "on_small_p99_ms": on_p99,
        "targets": {"small_p99_improvement": TARGET_P99_IMPROVEMENT,
                    "bulk_goodput_ratio": TARGET_BULK_RATIO},
        "met": improvement >= TARGET_P99_IMPROVEMENT and ratio >= TARGET_BULK_RATIO,
    }
    if floor_p99:
        # The most any policy could give on this box: off's p99 over small requests alone.
        out["floor_small_p99_ms"] = floor_p99
        out["ceiling_small_p99_improvement"] = round(off_p99 / floor_p99, 2)
    return out


def busy_share(c0: CpuSample, t0: float) -> float:
    """The box's CPUs' busy share since `c0` was sampled at monotonic time `t0`."""
    cpu, elapsed = cpu_delta(c0, cpu_sample()), time.monotonic() - t0
    return round(cpu.busy_s / max(elapsed, 1e-9) / max(1, len(cpu.per_cpu_softirq_s)), 3)


def _measure(ex: netns.Executor, p: topology.Plan, console: Console, duration: float,
             warmup: float, bulk: bool = True) -> tuple[runner.WorkloadResult, int, int, float]:
    """One workload run: its result, TCP segments sent, reorderings, CPU busy share."""
    watch = [e.ns for e in p.endpoints] + [n.ns for n in p.storage_nodes]
    s0, o0 = tcp_counters(ex, watch)
    c0, t0 = cpu_sample(), time.monotonic()
    res = runner.run(topology.workload_targets(p), duration=duration, loaders=LOADERS,
                     console=console, warmup=warmup, bulk=bulk, small_apart=True)
    busy = busy_share(c0, t0)
    s1, o1 = tcp_counters(ex, watch)
    return res, s1 - s0, o1 - o0, busy


def run_bench(emit: Emit, topology_file: Path = POLICY_TOPOLOGY, rounds: int = 3,
              duration: float = 15.0, warmup: float = 3.0,
              gateway_kinds: tuple[str, ...] = ("crosszone", "legacy")) -> list[dict[str, Any]]:
    """The whole benchmark; returns (and emits) every line. Always takes the deployment down."""
    console = Console(stderr=True)
    ex = netns.Executor()
    spec = topology.load(topology_file)
    if spec.queues is None:
        raise ValueError(f"{topology_file}: no `queues:`; without a bottleneck queue the "
                         "policy has nothing to act on")
    dep = deploy.Deployment(topology.plan(spec), ex, topology_path=str(topology_file))
    lines: list[dict[str, Any]] = []

    def out(line: dict[str, Any]) -> None:
        lines.append(line)
        emit(line)

    try:
        dep.up(log=lambda m: console.print(f"[cyan]up[/cyan] {m}"))
        p = dep.plan
        state = st.load()
        for kind in gateway_kinds:
            gws = p.gateways_of(kind)
            if not gws or not all(kinds.ready(g, state.fastpath if state else {}) for g in gws):
                console.print(f"[red]{kind}: no gateways that can carry traffic, skipped[/red]")
                continue
            dep.switch(kind, log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
            for rnd in range(rounds):
                for setting in (("off", "on") if rnd % 2 == 0 else ("on", "off")):
                    p = pol.set_policy(ex, p, setting == "on")
                    out(round_line(kind, setting, rnd, *_measure(ex, p, console, duration,
                                                                 warmup)))
            p = pol.set_policy(ex, p, False)
            floor_line = round_line(kind, "floor", rounds,
                                    *_measure(ex, p, console, duration, warmup, bulk=False))
            out(floor_line)
            floor = floor_line["small_p99_ms"] or None
            out(summary(kind, lines, floor))
    finally:
        deploy.down(ex, log=lambda m: console.print(f"[cyan]down[/cyan] {m}"))
    return lines
