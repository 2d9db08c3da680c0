"""Traffic through the emulated deployment: both directions, overlapping VPCs, ECMP, parallel sets.

Scenarios run on every gateway kind that can carry traffic (legacy always; crosszone once
`crosszone fastpath attach` exists).
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
import time

import pytest
from emulate_helpers import c0_rx_packets, kinds, probe_result, py_in, start_probe

from crosszone.emulate import deploy, topology
from crosszone.workload import runner

pytestmark = pytest.mark.integration

ACCEPT_ONE = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(({addr!r}, 9000)); s.listen(8); s.settimeout(10)
c, peer = s.accept(); c.sendall(b"hello " + peer[0].encode()); c.close()
print(peer[0])
"""

CONNECT = """
import socket
s = socket.create_connection(({addr!r}, 9000), timeout=5)
print(s.recv(100).decode())
"""


def _facing(ep: topology.Endpoint) -> str:
    """The storage-facing address of an endpoint (1:1 translation of its inner address)."""
    inner = int(ipaddress.IPv4Address(ep.addr)) - int(ep.vpc.prefix.network_address)
    return str(ipaddress.IPv4Address(int(ep.vpc.storage_facing.network_address) + inner))


@pytest.mark.parametrize("kind", ["legacy", "crosszone"])
def test_both_directions_and_translation(deployment: deploy.Deployment, kind: str) -> None:
    """Every endpoint of both VPCs connects to storage; storage sees the storage-facing source
    and its reply comes back (the payload carries what the storage node saw)."""
    if kind not in kinds(deployment):
        pytest.skip(f"{kind} gateways cannot carry traffic yet (fast path not attached)")
    deployment.switch(kind)  # type: ignore[arg-type]
    node = deployment.plan.storage_nodes[0]
    for ep in deployment.plan.endpoints:
        server = subprocess.Popen(
            ["ip", "netns", "exec", node.ns, sys.executable, "-c",
             ACCEPT_ONE.format(addr=node.addr)], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        reply = py_in(ep.ns, CONNECT.format(addr=node.addr)).strip()
        seen = server.communicate(timeout=15)[0].strip()
        assert seen == _facing(ep), f"{ep.name}: storage saw {seen}"
        assert reply == f"hello {_facing(ep)}", f"{ep.name}: reply {reply!r}"
    deployment.switch("legacy")


def test_overlapping_vpcs_never_reach_each_other(deployment: deploy.Deployment) -> None:
    """VPC A cannot reach VPC B's endpoint, neither by its storage-facing address nor inside."""
    a = next(e for e in deployment.plan.endpoints if e.vpc.name == "a")
    b = next(e for e in deployment.plan.endpoints if e.vpc.name == "b" and e.host == a.host)
    assert a.addr == b.addr  # the overlap this deployment always exercises
    server = subprocess.Popen(["ip", "netns", "exec", b.ns, sys.executable, "-c",
                               ACCEPT_ONE.format(addr="0.0.0.0").replace("settimeout(10)",
                                                                         "settimeout(4)")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    for target in (_facing(b), "192.168.255.1"):
        res = subprocess.run(["ip", "netns", "exec", a.ns, sys.executable, "-c",
                              CONNECT.format(addr=target).replace("timeout=5", "timeout=2")],
                             capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode != 0, f"VPC A reached {target}: {res.stdout}"
    out, _ = server.communicate(timeout=15)
    assert out.strip() == "", f"VPC B endpoint was reached from {out.strip()}"


def test_ecmp_spreads_flows_over_gateways(deployment: deploy.Deployment) -> None:
    """Many short connections from several endpoints land on every announcing gateway."""
    for kind in kinds(deployment):
        deployment.switch(kind)  # type: ignore[arg-type]
        gws = deployment.plan.gateways_of(kind)  # type: ignore[arg-type]
        before = {g.name: c0_rx_packets(g) for g in gws}
        probes = [start_probe(ep.ns, deployment.plan.storage_nodes[0].addr, 3.0, 0.02)
                  for ep in deployment.plan.endpoints]
        results = [probe_result(p) for p in probes]
        assert all(r["fail"] == 0 for r in results), results
        delta = {g.name: c0_rx_packets(g) - before[g.name] for g in gws}
        total = sum(delta.values())
        print(f"{kind}: packets per gateway {delta}")
        for name, n in delta.items():
            assert n > 0.15 * total, f"{kind}: gateway {name} got {n} of {total} packets"
    deployment.switch("legacy")


def test_legacy_and_crosszone_in_parallel_without_loss(deployment: deploy.Deployment) -> None:
    """All gateways announce at once (ECMP over both kinds); the workload sees no error, and
    switching sets while traffic flows loses nothing (make before break)."""
    node = deployment.plan.storage_nodes[0]
    probe = start_probe(deployment.plan.endpoints[0].ns, node.addr, 8.0, 0.01)
    deployment.switch("both")
    res = runner.run(deployment.plan, duration=4.0, loaders=1)
    target = "crosszone" if "crosszone" in kinds(deployment) else "legacy"
    deployment.switch(target)  # type: ignore[arg-type]
    deployment.switch("legacy")
    pr = probe_result(probe)
    print(f"parallel workload: {res.to_json()}; probe during switches: {pr}")
    assert res.errors == 0, res.error_samples
    assert res.read_bytes > 0 and res.written_bytes > 0 and res.small > 0
    assert pr["fail"] == 0, pr
