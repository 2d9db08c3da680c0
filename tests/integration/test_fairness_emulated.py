"""Per-tenant fairness end to end: a rate on the greedy tenant gives the other one its share.

examples/two-zone-policy.yaml narrowed to 2 hosts and one crosszone gateway (no legacy
gateways: the rate is the fast path's), the traffic policy on. Both tenants share each host's
shaped port (25 Mbit/s); tenant a runs GREEDY_LOADERS range readers per endpoint, tenant b
OTHER_LOADERS. Without a rate a's connections take most of each FIFO; with a's fair share as
its rate (`fair_rate_mbps`: 25 Mbit/s x 2 hosts / 2 tenants / 1 gateway) the token bucket
drops what a sends over it (`drop_vpc_rate`) and b gets the rest. Loose bounds (short runs on
a shared box): b's share must grow by a clear margin and come near its fair half, and a must be
held near its rate; the figures and their conditions are `crosszone bench fairness`'s
(docs/policy.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from emulate_helpers import deployed, require
from rich.console import Console

from crosszone_lab.bench import fairness
from crosszone_lab.emulate import demo, deploy, topology
from crosszone_lab.emulate import policy as pol
from crosszone_lab.workload import runner

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "examples" / "two-zone-policy.yaml"
SECONDS, WARMUP = 12.0, 2.0
GREEDY, GREEDY_LOADERS, OTHER_LOADERS = "a", 6, 2


@pytest.fixture(scope="module")
def dep() -> Iterator[deploy.Deployment]:
    """Two hosts, one crosszone gateway, queues on the host ports; always taken down."""
    spec = topology.load(POLICY)
    spec = topology.parse(spec.model_dump(mode="json") | {
        "hosts": 2, "gateways": {"crosszone": 1, "legacy": 0}, "active": "crosszone"},
        source=str(POLICY))
    with deployed(spec, POLICY) as d:
        yield d


def _round(d: deploy.Deployment, rate: int | None) -> dict[str, object]:
    d.plan = pol.apply(d.ex, pol.with_vpc_rates(d.plan, {GREEDY: rate}))
    more = {e.name: GREEDY_LOADERS for e in d.plan.endpoints if e.vpc.name == GREEDY}
    drops0 = fairness.vpc_rate_drops(d.ex, d.plan)
    res = runner.run(demo.policy_targets(d.plan), duration=SECONDS, loaders=OTHER_LOADERS,
                     console=Console(quiet=True), warmup=WARMUP, loaders_for=more,
                     small_apart=True)
    line = fairness.round_line("on" if rate else "off", 0, res, GREEDY, SECONDS - WARMUP,
                               fairness.vpc_rate_drops(d.ex, d.plan) - drops0)
    print(line, res.error_samples[:3])
    return line


def test_a_rate_on_the_greedy_tenant_gives_the_other_its_share(dep: deploy.Deployment) -> None:
    require(dep, "crosszone")
    rate = fairness.fair_rate_mbps(dep.plan)
    # As `bench fairness` runs it: with the policy off its rounds moved a third less in all,
    # with checkpoint timeouts, and the other tenant did not use what the rate freed.
    dep.plan = pol.set_policy(dep.ex, dep.plan, True)
    off, on = _round(dep, None), _round(dep, rate)
    assert off["rate_drops"] == 0, "packets dropped over a rate that is not set"
    assert on["rate_drops"] > 0, "the greedy tenant never reached its rate: nothing was tested"
    off_share, on_share = float(off["other_share"]), float(on["other_share"])  # type: ignore[arg-type]
    assert off_share < 0.4, f"without a rate the greedy tenant did not dominate ({off_share})"
    assert on_share > off_share + 0.1 and on_share >= 0.4, \
        f"the other tenant's share of the goodput: {off_share} without the rate, {on_share} with"
    greedy_gbps = on["tenants"][GREEDY]["bulk_gbps"]  # type: ignore[index]
    # The bucket's 1 MiB burst and one packet per CPU per refill over the rate, at most.
    assert greedy_gbps <= 1.2 * rate / 1000, f"greedy tenant {greedy_gbps} Gbps over {rate} Mbit/s"
