"""Benchmark: which takes a gateway out of a router's forwarding faster on FRR 8.4, withdrawing
its announcements (`no network`, one BGP UPDATE) or shutting its BGP neighbour (`neighbor X
shutdown`: a Cease NOTIFICATION, the router drops every path via the gateway at once)?

Not a test (conventions 14): run as root, it prints JSON with the figures and the conditions.
Two namespaces as in test_agent_routing (the gateway's FRR applied by the agent's RoutingOwner,
so the gateway announces what the product renders); each way is timed from the gateway's vtysh
command to the moment the router's kernel has none of the gateway's IPv4 routes left (polled
every millisecond over netlink inside the router's namespace), then undone and the routes
awaited again.

    PYTHONPATH=src:tests:tests/integration python tests/integration/bench_fail_closed_withdraw.py
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

from pyroute2 import IPRoute

sys.path.insert(0, str(Path(__file__).parent))
from frr_netns import sh
from test_agent_routing import GW_ADDR, ROUTER_CONF, RT_ADDR, VPC_A, Lab, _intent

from crosszone.agent.agent import Agent
from crosszone.agent.frr_apply import FrrReloadApplier, FrrTarget
from crosszone.agent.frr_vty import run_commands
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.compile.diff import DictSink
from crosszone.linux.netns import in_netns
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT

ROUTES = ("10.0.0.100/32", "100.64.0.0/16")
WAYS = {
    "withdraw": (["configure terminal", "router bgp 65100", "address-family ipv4 unicast",
                  *[f"no network {p}" for p in ROUTES], "end"],
                 ["configure terminal", "router bgp 65100", "address-family ipv4 unicast",
                  *[f"network {p}" for p in ROUTES], "end"]),
    "neighbor_shutdown": (["configure terminal", "router bgp 65100",
                           f"neighbor {RT_ADDR} shutdown", "end"],
                          ["configure terminal", "router bgp 65100",
                           f"no neighbor {RT_ADDR} shutdown", "end"]),
}
# the same commands straight to bgpd's vty socket (frr_vty), without vtysh's start
WAYS.update({f"{k}_vty": v for k, v in list(WAYS.items())})


def _present(ipr: IPRoute) -> set[str]:
    out = set()
    for r in ipr.get_routes(family=socket.AF_INET):
        dst = r.get_attr("RTA_DST")
        if dst and f"{dst}/{r['dst_len']}" in ROUTES:
            out.add(f"{dst}/{r['dst_len']}")
    return out


def _wait(ipr: IPRoute, want: bool, timeout: float = 30.0) -> float:
    t0 = time.monotonic()
    while (_present(ipr) == set(ROUTES)) != want if want else bool(_present(ipr)):
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"routes {'back' if want else 'gone'}: timed out")
        time.sleep(0.001)
    return time.monotonic()


def main(rounds: int = 5) -> None:
    """Run the benchmark and print JSON."""
    base = Path(tempfile.mkdtemp(prefix="cz25a-bench-"))
    base.chmod(0o755)
    lab = Lab(base)
    lab.gw_ns, lab.rt_ns = f"cz25a-{os.getpid()}-gw", f"cz25a-{os.getpid()}-rt"
    lab.gw.ns, lab.rt.ns = lab.gw_ns, lab.rt_ns
    store = SqliteStore(str(base / "s.db"))
    results: dict[str, list[float]] = {k: [] for k in WAYS}
    cmd_ms: dict[str, list[float]] = {k: [] for k in WAYS}
    try:
        lab.up()
        FrrReloadApplier(FrrTarget(pathspace=lab.rt_ns, config_file=lab.rt.dir / "frr.conf",
                                   rundir=base / "run")).apply(ROUTER_CONF)
        target = FrrTarget(vty_socket=lab.gw.dir, config_file=lab.gw.dir / "frr.conf",
                           rundir=base / "run")
        owner = RoutingOwner("gw-t", FrrReloadApplier(target), hostname=socket.gethostname(),
                             check_every=3600)
        agent = Agent("gw-t", store, DictSink(), lambda name: 5, routing=owner)
        store.put_many({INTENT + k: v for k, v in _intent(VPC_A).items()})
        agent.step(0)
        with in_netns(lab.rt_ns):
            ipr = IPRoute()
        try:
            _wait(ipr, True, 60)
            time.sleep(2)  # past a new session's first reset (docs/routing.md)
            _wait(ipr, True, 60)
            for _ in range(rounds):
                for way, (out, back) in WAYS.items():
                    t0 = time.monotonic()
                    if way.endswith("_vty"):
                        run_commands(lab.gw.sockets / "bgpd.vty", out[:-1])
                    else:
                        lab.gw.vtysh(*out)
                    t1 = time.monotonic()
                    gone = _wait(ipr, False)
                    results[way].append(round((gone - t0) * 1000, 1))
                    cmd_ms[way].append(round((t1 - t0) * 1000, 1))
                    lab.gw.vtysh(*back)
                    _wait(ipr, True, 60)
                    time.sleep(1)
        finally:
            ipr.close()
    finally:
        store.close()
        lab.down()
        shutil.rmtree(base, ignore_errors=True)
    frr = sh("/usr/lib/frr/bgpd", "--version", check=False).stdout.splitlines()[:1]
    print(json.dumps({
        "what": "ms from the gateway's vtysh command to the router's kernel without the "
                "gateway's routes",
        "ms": results, "vtysh_command_ms": cmd_ms,
        "median_ms": {k: sorted(v)[len(v) // 2] for k, v in results.items()},
        "conditions": {"kernel": platform.release(), "cpus": os.cpu_count(), "frr": frr,
                       "routes": list(ROUTES), "peer": GW_ADDR, "rounds": rounds},
    }, indent=1))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
