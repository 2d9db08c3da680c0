"""`crosszone bench fairness`: two tenants, one greedy, without and with a per-tenant rate.

The deployment of examples/two-zone-policy.yaml through the crosszone gateways: both VPCs
share every GPU host and so every shaped port toward the hosts. The greedy tenant (`--greedy`,
VPC a) runs `--greedy-loaders` range readers per endpoint, the other one reader; both send
small requests. Without a rate the greedy tenant's many TCP connections take most of each
FIFO; with `rate_mbps` on its VPC (the intent's per-tenant rate: a token bucket per VPC in the
fast path of every gateway) it is held to that rate, and the other tenant gets the rest.

One JSON line per round and setting, `{"fairness": "off"|"on", "round", "tenants": {vpc:
{"bulk_gbps", "small_p99_ms"}}, "other_share"}`, and a summary with the other tenant's share of
the bulk goodput off and on (medians), interleaved rounds as in `bench policy`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from crosszone.abi.objects import ROOT
from crosszone.emulate import deploy, topology
from crosszone.emulate import policy as pol
from crosszone.linux import netns
from crosszone.workload import runner

POLICY_TOPOLOGY = ROOT / "examples" / "two-zone-policy.yaml"
Emit = Callable[[dict[str, Any]], None]


def tenants(res: runner.WorkloadResult, duration: float) -> dict[str, dict[str, float]]:
    """Bulk goodput and small-request p99 per VPC (the endpoint name's suffix: h1-a -> a)."""
    by: dict[str, runner.WorkloadResult] = {}
    for name, doc in res.per_endpoint.items():
        vpc = name.rsplit("-", 1)[-1]
        acc = by.setdefault(vpc, runner.WorkloadResult(duration_s=duration, endpoints=0))
        acc.endpoints += 1
        acc.read_bytes += int(doc["read_bytes"])
        acc.small_lat_us += list(doc.get("small_lat_us", []))
    return {vpc: {"bulk_gbps": round(r.gbps(r.read_bytes), 4),
                  "small_p99_ms": round(r.percentile_us(0.99) / 1000, 3)}
            for vpc, r in sorted(by.items())}


def round_line(setting: str, rnd: int, res: runner.WorkloadResult, greedy: str,
               duration: float) -> dict[str, Any]:
    """The JSON line of one round."""
    t = tenants(res, duration)
    total = sum(x["bulk_gbps"] for x in t.values())
    other = total - t.get(greedy, {}).get("bulk_gbps", 0.0)
    return {"fairness": setting, "round": rnd, "tenants": t,
            "other_share": round(other / total, 3) if total else 0.0, "errors": res.errors}


def summary(lines: list[dict[str, Any]], greedy: str, rate_mbps: int) -> dict[str, Any]:
    """Medians of the other tenants' share of the bulk goodput, without and with the rate."""
    def med(setting: str) -> float:
        vals = [ln["other_share"] for ln in lines if ln.get("fairness") == setting]
        return float(statistics.median(vals)) if vals else 0.0

    return {"summary": True, "greedy": greedy, "greedy_rate_mbps": rate_mbps,
            "other_share_off": med("off"), "other_share_on": med("on")}


def run_bench(emit: Emit, rounds: int = 2, duration: float = 15.0, warmup: float = 3.0,
              greedy: str = "a", greedy_loaders: int = 6, rate_mbps: int = 100,
              topology_file: Path = POLICY_TOPOLOGY) -> list[dict[str, Any]]:
    """The whole benchmark; always takes the deployment down."""
    console = Console(stderr=True)
    ex = netns.Executor()
    spec = topology.load(topology_file)
    if greedy not in {v.name for v in spec.vpcs}:
        raise ValueError(f"no VPC {greedy!r} in {topology_file}")
    dep = deploy.Deployment(topology.plan(spec), ex, topology_path=str(topology_file))
    lines: list[dict[str, Any]] = []
    try:
        dep.up(log=lambda m: console.print(f"[cyan]up[/cyan] {m}"))
        dep.switch("crosszone", log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
        p = dep.plan
        more = {e.name: greedy_loaders for e in p.endpoints if e.vpc.name == greedy}
        for rnd in range(rounds):
            for setting in (("off", "on") if rnd % 2 == 0 else ("on", "off")):
                p = pol.apply(ex, pol.with_vpc_rates(
                    p, {greedy: rate_mbps if setting == "on" else None}))
                res = runner.run(topology.workload_targets(p), duration=duration, loaders=1,
                                 console=console, warmup=warmup, loaders_for=more,
                                 small_apart=True)
                lines.append(round_line(setting, rnd, res, greedy, duration))
                emit(lines[-1])
        lines.append(summary(lines, greedy, rate_mbps))
        emit(lines[-1])
    finally:
        deploy.down(ex, log=lambda m: console.print(f"[cyan]down[/cyan] {m}"))
    return lines
