"""Jumbo frames: a 9000-byte underlay carries 8950-byte inner packets end to end.

A deployment of its own (1 host, 1 crosszone + 1 legacy gateway, 1 storage node) with
`underlay_mtu: 9000`: compute-zone links at 9000, VPCs and the storage zone at 8950. On veth a
frame that large does not fit in one page, so XDP sees it as a multi-buffer frame; the fast
path's program is frags-aware (`xdp.frags`), which is also what lets it attach at this MTU
(on Linux 6.18 a plain XDP program is refused when the peer MTU is 9000: "veth: Peer MTU is too
large to set XDP").

The probe sends UDP datagrams whose IP packet is exactly the inner MTU (8950 bytes) with DF set,
so nothing may fragment them anywhere, and the storage node echoes them back: both directions
carry 9000-byte VXLAN frames through the gateway.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from emulate_helpers import py_in, require

from crosszone.linux import netns
from crosszone_lab.emulate import crosszone_gateway as xgw
from crosszone_lab.emulate import deploy, topology

pytestmark = pytest.mark.integration

JUMBO = {
    "name": "jumbo", "hosts": 1, "underlay_mtu": 9000,
    "vpcs": [{"name": "a", "vni": 1001, "prefix": "192.168.0.0/16",
              "storage_facing": "100.64.0.0/16"}],
    "gateways": {"crosszone": 1, "legacy": 1},
    "storage": {"nodes": 1, "shards": 1, "shard_size_mib": 4, "checkpoint_max_mib": 4},
}

ECHO = """
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(({addr!r}, 9998)); s.settimeout(8)
s.setsockopt(socket.IPPROTO_IP, 10, 2)
n = 0
try:
    while True:
        data, peer = s.recvfrom(65535); s.sendto(data, peer); n += 1
except socket.timeout:
    pass
print(n)
"""

SEND = """
import json, socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.IPPROTO_IP, 10, 2)  # IP_MTU_DISCOVER = IP_PMTUDISC_DO: DF
s.settimeout(1.0)
size = {size}
ok = bad = lost = 0
for i in range(20):
    payload = bytes([(i + k) & 0xFF for k in range(size)])
    s.sendto(payload, ({addr!r}, 9998))
    try:
        data = s.recv(65535)
    except socket.timeout:
        lost += 1
        continue
    if data == payload:
        ok += 1
    else:
        bad += 1
print(json.dumps({{"ok": ok, "bad": bad, "lost": lost}}))
"""


@pytest.fixture(scope="module")
def jumbo() -> Iterator[deploy.Deployment]:
    if os.geteuid() != 0:
        pytest.skip("integration tests need root")
    spec = topology.parse(JUMBO, source="jumbo")
    dep = deploy.Deployment(topology.plan(spec), netns.Executor(), topology_path="jumbo")
    try:
        dep.up(log=lambda m: print(f"[up] {m}"))
        yield dep
    finally:
        deploy.down(netns.Executor(), log=lambda m: print(f"[down] {m}"))


def test_mtus_are_as_planned(jumbo: deploy.Deployment) -> None:
    """9000 on the gateways' compute links, 8950 on their storage links and in the VPC."""
    gw = jumbo.plan.gateways_of("crosszone")[0]
    ep = jumbo.plan.endpoints[0]

    def mtu(ns: str, dev: str) -> int:
        out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", dev], capture_output=True,
                             text=True, check=True).stdout
        return int(json.loads(out)[0]["mtu"])

    assert mtu(gw.ns, "c0") == 9000 and mtu(gw.ns, "s0") == 8950
    assert mtu(ep.ns, "eth0") == 8950
    state = xgw.read_stats(gw)
    assert state, "the fast path is not attached at MTU 9000"


@pytest.mark.parametrize("kind", ["crosszone", "legacy"])
def test_8950_byte_inner_packets_both_directions(jumbo: deploy.Deployment, kind: str) -> None:
    require(jumbo, kind)
    jumbo.switch(kind)  # type: ignore[arg-type]
    node, ep = jumbo.plan.storage_nodes[0], jumbo.plan.endpoints[0]
    gw = jumbo.plan.gateways_of(kind)[0]  # type: ignore[arg-type]
    before = xgw.read_stats(gw) if kind == "crosszone" else {}
    server = subprocess.Popen(["ip", "netns", "exec", node.ns, sys.executable, "-c",
                               ECHO.format(addr=node.addr)], stdout=subprocess.PIPE, text=True)
    time.sleep(0.3)
    size = jumbo.plan.inner_mtu - 28  # IPv4 + UDP headers: the IP packet is the inner MTU
    res = json.loads(py_in(ep.ns, SEND.format(addr=node.addr, size=size)))
    server.kill()
    server.wait()
    print(f"{kind}: {res}")
    assert res == {"ok": 20, "bad": 0, "lost": 0}, res
    if kind == "crosszone":
        after = xgw.read_stats(gw)
        fwd = {r: after["reasons"][r]["packets"] - before["reasons"][r]["packets"]
               for r in ("fwd_to_storage", "fwd_to_compute")}
        # The datagrams went through the fast path, not around it.
        assert fwd["fwd_to_storage"] >= 20 and fwd["fwd_to_compute"] >= 20, fwd
    jumbo.switch("legacy")
