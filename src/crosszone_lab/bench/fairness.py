"""`crosszone bench fairness`: two tenants, one greedy, without and with a per-tenant rate.

The deployment of examples/two-zone-policy.yaml through the crosszone gateways: both VPCs share
every GPU host and so every shaped port toward the hosts (the bottleneck: 25 Mbit/s per host,
the topology's rate). The greedy tenant (`--greedy`, VPC a) runs `--greedy-loaders` range
readers per endpoint (6), the other `--other-loaders` (2, as in `bench policy`); both write
checkpoints, in parts that fit the shaped storage ports as in `bench policy`
(`demo.policy_targets`: larger ones time out), and send small requests. Without a rate the
greedy tenant's many TCP connections take most of each FIFO; with `rate_mbps` on its VPC (the
intent's per-tenant rate: a token bucket per VPC in the fast path of every gateway) it is held
to that rate, and the other tenant gets the rest. The traffic policy is on in every round
(`--no-policy`: off), as a deployment would run both: with it off the rounds moved a third less
in all, with checkpoint timeouts (docs/policy.md), so what the rate frees was not used.

The rate is per gateway (each gateway has its own bucket). By default it is the greedy tenant's
fair share of the shaped host ports spread over the crosszone gateways (`fair_rate_mbps`):
25 Mbit/s x 4 hosts / 2 tenants / 2 gateways = 25 Mbit/s here. A rate above that share holds
back nothing the ports have not already held back.

One JSON line per round and setting, `{"fairness": "off"|"on", "round", "cpu_busy", "tenants":
{vpc: {"bulk_gbps", "small_p99_ms"}}, "bulk_gbps", "other_share", "rate_drops", "errors"}`
(`bulk_gbps`: range-read bytes as they arrived after the warmup, `rate_drops`: packets the
gateways dropped over a VPC's rate, `drop_vpc_rate`), and a summary
with the other tenant's share of the bulk goodput off and on (medians of interleaved rounds, as
in `bench policy`), the target (`FAIR_SHARE_MARGIN` of its fair share with the rate on) and
`met`.
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
from crosszone_lab.bench.policy import busy_share
from crosszone_lab.emulate import demo, deploy, kinds, topology
from crosszone_lab.emulate import policy as pol
from crosszone_lab.emulate.demo import cpu_sample
from crosszone_lab.workload import runner

POLICY_TOPOLOGY = ROOT / "examples" / "two-zone-policy.yaml"
Emit = Callable[[dict[str, Any]], None]
# The other tenants' share of the bulk goodput with the rate on must reach this much of their
# fair share: rounds of 15 s on a shared 2-core box move a few percent either way.
FAIR_SHARE_MARGIN = 0.9


def tenants(res: runner.WorkloadResult, seconds: float) -> dict[str, dict[str, float]]:
    """Per VPC (the endpoint name's suffix: h1-a -> a): range-read goodput over the timed
    window of `seconds` (bytes as they arrived, `timed_read_bytes`: whole blocks counted at
    completion would credit a tenant with many connections with its blocks still in flight at
    the deadline) and the small requests' p99."""
    by: dict[str, runner.WorkloadResult] = {}
    for name, doc in res.per_endpoint.items():
        vpc = name.rsplit("-", 1)[-1]
        acc = by.setdefault(vpc, runner.WorkloadResult(duration_s=seconds, endpoints=0))
        acc.endpoints += 1
        acc.timed_read_bytes += int(doc["timed_read_bytes"])
        acc.small_lat_us += list(doc.get("small_lat_us", []))
    return {vpc: {"bulk_gbps": round(r.gbps(r.timed_read_bytes), 4),
                  "small_p99_ms": round(r.percentile_us(0.99) / 1000, 3)}
            for vpc, r in sorted(by.items())}


def fair_rate_mbps(p: topology.Plan) -> int:
    """The greedy tenant's fair share of the shaped host ports, per crosszone gateway (its
    bucket is per gateway): the ports' rate x hosts / tenants / gateways."""
    q = p.spec.queues
    gws = len(p.gateways_of("crosszone"))
    if q is None or "hosts" not in q.links or not gws:
        raise ValueError("no shaped host ports or no crosszone gateway: give --rate-mbps")
    return max(1, round(q.rate_mbit * len(p.hosts) / len(p.spec.vpcs) / gws))


def round_line(setting: str, rnd: int, res: runner.WorkloadResult, greedy: str,
               seconds: float, rate_drops: int = 0,
               cpu_busy: float | None = None) -> dict[str, Any]:
    """The JSON line of one round (`seconds`: its timed window; `cpu_busy`: the box's CPUs'
    busy share over the round)."""
    t = tenants(res, seconds)
    total = sum(x["bulk_gbps"] for x in t.values())
    other = total - t.get(greedy, {}).get("bulk_gbps", 0.0)
    return {"fairness": setting, "round": rnd, "cpu_busy": cpu_busy, "tenants": t,
            "bulk_gbps": round(total, 4),
            "other_share": round(other / total, 3) if total else 0.0, "rate_drops": rate_drops,
            "errors": res.errors}


def summary(lines: list[dict[str, Any]], greedy: str, rate_mbps: int, gateways: int = 1,
            n_tenants: int = 2, traffic_policy: bool = True) -> dict[str, Any]:
    """Medians over the rounds of the other tenants' share of the bulk goodput, the greedy
    tenant's and everyone's goodput, without and with the rate; `met` when the others get at
    least FAIR_SHARE_MARGIN of their fair share ((n - 1) / n) with the rate on."""
    def med(setting: str, value: Callable[[dict[str, Any]], float]) -> float:
        vals = [value(ln) for ln in lines if ln.get("fairness") == setting]
        return round(float(statistics.median(vals)), 4) if vals else 0.0

    def greedy_gbps(ln: dict[str, Any]) -> float:
        return float(ln["tenants"].get(greedy, {}).get("bulk_gbps", 0.0))

    target = round(FAIR_SHARE_MARGIN * (n_tenants - 1) / n_tenants, 3)
    on_share = med("on", lambda ln: ln["other_share"])
    return {"summary": True, "traffic_policy": "on" if traffic_policy else "off",
            "greedy": greedy, "greedy_rate_mbps": rate_mbps,
            "greedy_cap_gbps": round(rate_mbps * gateways / 1000, 4),
            "other_share_off": med("off", lambda ln: ln["other_share"]),
            "other_share_on": on_share,
            "greedy_gbps_off": med("off", greedy_gbps), "greedy_gbps_on": med("on", greedy_gbps),
            "bulk_gbps_off": med("off", lambda ln: ln["bulk_gbps"]),
            "bulk_gbps_on": med("on", lambda ln: ln["bulk_gbps"]),
            "targets": {"other_share_on": target},
            "met": any(ln.get("fairness") == "on" for ln in lines) and on_share >= target}


def vpc_rate_drops(ex: netns.Executor, p: topology.Plan) -> int:
    """Packets the crosszone gateways have dropped over a VPC's rate, since they started."""
    return sum(kinds.get("crosszone").drops(ex, gw).get("drop_vpc_rate", 0)
               for gw in p.gateways_of("crosszone"))


def run_bench(emit: Emit, rounds: int = 2, duration: float = 15.0, warmup: float = 3.0,
              greedy: str = "a", greedy_loaders: int = 6, other_loaders: int = 2,
              rate_mbps: int | None = None, traffic_policy: bool = True,
              topology_file: Path = POLICY_TOPOLOGY) -> list[dict[str, Any]]:
    """The whole benchmark (`rate_mbps` None: `fair_rate_mbps`; `traffic_policy`: the small/bulk
    marking on in every round); always takes the deployment down."""
    console = Console(stderr=True)
    ex = netns.Executor()
    spec = topology.load(topology_file)
    if greedy not in {v.name for v in spec.vpcs}:
        raise ValueError(f"no VPC {greedy!r} in {topology_file}")
    p = topology.plan(spec)
    rate = rate_mbps or fair_rate_mbps(p)
    dep = deploy.Deployment(p, ex, topology_path=str(topology_file))
    lines: list[dict[str, Any]] = []
    try:
        dep.up(log=lambda m: console.print(f"[cyan]up[/cyan] {m}"))
        dep.switch("crosszone", log=lambda m: console.print(f"[cyan]switch[/cyan] {m}"))
        p = pol.set_policy(ex, dep.plan, traffic_policy)
        more = {e.name: greedy_loaders for e in p.endpoints if e.vpc.name == greedy}
        for rnd in range(rounds):
            for setting in (("off", "on") if rnd % 2 == 0 else ("on", "off")):
                p = pol.apply(ex, pol.with_vpc_rates(
                    p, {greedy: rate if setting == "on" else None}))
                drops0, c0, t0 = vpc_rate_drops(ex, p), cpu_sample(), time.monotonic()
                res = runner.run(demo.policy_targets(p), duration=duration,
                                 loaders=other_loaders, console=console, warmup=warmup,
                                 loaders_for=more, small_apart=True)
                busy = busy_share(c0, t0)
                lines.append(round_line(setting, rnd, res, greedy, duration - warmup,
                                        vpc_rate_drops(ex, p) - drops0, busy))
                for sample in res.error_samples[:3]:
                    console.print(f"[yellow]error[/yellow] {sample}")
                emit(lines[-1])
        lines.append(summary(lines, greedy, rate, len(p.gateways_of("crosszone")),
                             len(p.spec.vpcs), traffic_policy))
        emit(lines[-1])
    finally:
        deploy.down(ex, log=lambda m: console.print(f"[cyan]down[/cyan] {m}"))
    return lines
