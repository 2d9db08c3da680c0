"""A gateway fails and traffic continues through the others; the interruption is printed.

Three failures: both links down (the routers see carrier loss; the kernel drops the nexthop from
its group at once), one link down (the gateway must also stop announcing on its other side, or
that router keeps sending it traffic it cannot deliver), and a silent failure (links up, every
received packet dropped by an XDP program: only BFD notices).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from emulate_helpers import probe_result, require, sh, start_probe

from crosszone.linux import netns
from crosszone_lab.emulate import crosszone_gateway as xgw
from crosszone_lab.emulate import deploy
from crosszone_lab.emulate import state as st

pytestmark = pytest.mark.integration

DROP_ALL_C = """\
#include <linux/bpf.h>
__attribute__((section("xdp"), used)) int drop_all(struct xdp_md *ctx) { return XDP_DROP; }
char _license[] __attribute__((section("license"), used)) = "GPL";
"""
# Probe cadence and the bound we accept: BFD 5 x 30 ms plus BGP/zebra work on a busy box.
MAX_INTERRUPTION_S = 2.0


@pytest.fixture(scope="module")
def drop_all_obj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny drop-all XDP object, compiled here."""
    d = tmp_path_factory.mktemp("xdp")
    src, obj = d / "drop_all.c", d / "drop_all.o"
    src.write_text(DROP_ALL_C)
    arch = sh("uname", "-m").strip()
    sh("clang", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}-linux-gnu",
       "-c", str(src), "-o", str(obj))
    return obj


def _run_failure(dep: deploy.Deployment, kind: str, fail: list[list[str]],
                 restore: list[list[str]],
                 during: Callable[[], None] | None = None) -> dict[str, float]:
    dep.switch(kind)  # type: ignore[arg-type]
    node = dep.plan.storage_nodes[0]
    probes = [start_probe(ep.ns, node.addr, 6.0, 0.01) for ep in dep.plan.endpoints[:2]]
    time.sleep(1.5)
    try:
        for argv in fail:
            sh(*argv)
        time.sleep(3.0)
        if during is not None:
            during()
    finally:
        for argv in restore:
            subprocess.run(argv, capture_output=True, check=False)
    results = [probe_result(p) for p in probes]
    # The interruption is the longest time a probe went without a successful request. (The
    # span from the first to the last failed request is not: a gateway that rejoins after the
    # repair can cost one request seconds after the failover cost another.)
    worst = max(r["max_gap_s"] for r in results)
    print(f"{kind}: interruption (longest gap without success) {worst * 1000:.0f} ms, "
          f"failed requests {[r['fail'] for r in results]}, probes {results}")
    # Routes must come back before the next scenario.
    dep.wait_sessions(timeout=30)
    dep.wait_routes(kind, st.load())
    return {"interruption_s": worst, "ok": sum(r["ok"] for r in results)}


@pytest.fixture(scope="module")
def dep(deployment: deploy.Deployment) -> Iterator[deploy.Deployment]:
    yield deployment
    deployment.switch("legacy")


@pytest.mark.parametrize("kind", ["legacy", "crosszone"])
def test_link_down_failover(dep: deploy.Deployment, kind: str) -> None:
    """Both links of one gateway go down; the other gateway of its kind carries on."""
    require(dep, kind)
    gw = dep.plan.gateways_of(kind)[0]  # type: ignore[arg-type]
    down = [["ip", "-n", gw.ns, "link", "set", dev, "down"] for dev in ("c0", "s0")]
    up = [["ip", "-n", gw.ns, "link", "set", dev, "up"] for dev in ("c0", "s0")]
    res = _run_failure(dep, kind, down, up)
    assert res["interruption_s"] < MAX_INTERRUPTION_S, res
    assert res["ok"] > 100


@pytest.mark.parametrize("kind", ["legacy", "crosszone"])
@pytest.mark.parametrize("side", ["c0", "s0"])
def test_one_link_down_withdraws_the_other_side(dep: deploy.Deployment, kind: str,
                                                side: str) -> None:
    """One link of a gateway goes down (compute side c0 or storage side s0): the router on the
    dead link drops it at once, and the gateway withdraws what it announces to the other router,
    so no request and no reply is sent into it; traffic carries on through the other gateway."""
    require(dep, kind)
    gw = dep.plan.gateways_of(kind)[0]  # type: ignore[arg-type]
    others = {f"g{g.index}" for g in dep.announced(kind, st.load()) if g is not gw}
    seen: dict[str, set[str]] = {}

    def check() -> None:
        seen.update(dep.fib())

    res = _run_failure(dep, kind, [["ip", "-n", gw.ns, "link", "set", side, "down"]],
                       [["ip", "-n", gw.ns, "link", "set", side, "up"]], during=check)
    print(f"{kind} {gw.name} {side} down: routes during the failure {seen}")
    assert seen and all(hops == others for hops in seen.values()), (seen, others)
    assert res["interruption_s"] < MAX_INTERRUPTION_S, res
    assert res["ok"] > 100


@pytest.mark.parametrize("kind", ["legacy", "crosszone"])
def test_silent_failure_failover(dep: deploy.Deployment, kind: str, drop_all_obj: Path) -> None:
    """A drop-all XDP program on one gateway's ports: BFD detects it, traffic moves over."""
    require(dep, kind)
    gw = dep.plan.gateways_of(kind)[0]  # type: ignore[arg-type]
    # -force: on a crosszone gateway this replaces the fast path, which is the failure we want.
    fail = [["ip", "-n", gw.ns, "-force", "link", "set", "dev", dev, "xdp", "obj",
             str(drop_all_obj), "sec", "xdp"] for dev in ("c0", "s0")]
    if kind == "crosszone":
        # Repair by attaching the fast path over the drop-all program (bpf_xdp_attach replaces
        # atomically). Taking the drop-all off first would let BFD and BGP come back while the
        # kernel, which has no VXLAN device on a crosszone gateway, black-holes the tunnel
        # until the attach finishes: a 1.5 s outage that belongs to the repair, not the failover.
        restore = [list(op.argv) for op in xgw.attach_ops(gw) if isinstance(op, netns.Cmd)]
    else:
        restore = [["ip", "-n", gw.ns, "link", "set", "dev", dev, "xdp", "off"]
                   for dev in ("c0", "s0")]
    res = _run_failure(dep, kind, fail, restore)
    assert res["interruption_s"] < MAX_INTERRUPTION_S, res
    assert res["ok"] > 100
