"""Consistent ECMP in the real program: removing a next hop moves only that next hop's flows."""

from __future__ import annotations

import yaml
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from crosszone.abi.reasons import Reason
from crosszone.compile.tables import compile_tables
from crosszone.fastpath.testing.testrun import TestRunner
from crosszone.intent.cluster import parse_cluster

from packet_fixtures import EXAMPLE, vxlan


def _tables(n_nexthops):
    doc = yaml.safe_load(EXAMPLE.read_text())
    pool = next(p for p in doc["storage_pools"] if p["name"] == "datasets")
    pool["next_hops"] = [
        {"name": f"st-r{i}", "interface": "storage0", "mac": f"02:00:00:00:30:{i:02x}"}
        for i in range(1, n_nexthops + 1)
    ]
    return compile_tables(parse_cluster(yaml.safe_dump(doc), "ecmp.yaml"), "gw-a")


def _flows():
    for i in range(600):
        inner = IP(src="192.168.1.10", dst=f"172.16.{i // 250}.{i % 250 + 1}") / TCP(
            sport=20000 + i, dport=443
        )
        yield bytes(vxlan(inner))


def _next_hops(runner):
    out = []
    for frame in _flows():
        res = runner.run(frame)
        assert res.reason == Reason.FWD_TO_STORAGE
        out.append(Ether(res.data).dst)
    return out


def test_removing_a_next_hop_moves_only_its_flows(gateway_object):
    with TestRunner(_tables(4), gateway_object) as r4:
        before = _next_hops(r4)
    with TestRunner(_tables(3), gateway_object) as r3:
        after = _next_hops(r3)
    removed = "02:00:00:00:30:04"
    assert len(set(before)) == 4 and removed not in after
    moved = [i for i, (a, b) in enumerate(zip(before, after)) if a != b]
    on_removed = [i for i, a in enumerate(before) if a == removed]
    assert moved == on_removed and len(moved) > 600 // 8
