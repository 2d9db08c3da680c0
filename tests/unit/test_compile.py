"""compile_tables is pure and deterministic, and its tables say what the intent says."""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from crosszone.abi import layout
from crosszone.compile.ecmp import rendezvous_buckets
from crosszone.compile.tables import Tables, compile_tables
from crosszone.intent.cluster import load_cluster, parse_cluster

from packet_fixtures import EXAMPLE

ROOT = Path(__file__).resolve().parents[2]
# Tables of the example files, written by the compiler this one replaced (version-1 `Intent`
# projected from the cluster by `for_gateway`, then `compile_intent`): compile_tables must give
# exactly these.
GOLDEN = json.loads((Path(__file__).parent / "golden" / "compile_tables.json").read_text())


def _intent(mutate=None):
    doc = yaml.safe_load(EXAMPLE.read_text())
    if mutate:
        mutate(doc)
    return parse_cluster(yaml.safe_dump(doc), "test.yaml")


def _tables(c):
    """The tables of the one gateway of a version-1 example."""
    return compile_tables(c, c.gateways[0].name)


def _canon(x: object) -> object:
    """Tables as JSON values (bytes in hex, addresses as text, sets sorted)."""
    if dataclasses.is_dataclass(x):
        return {f.name: _canon(getattr(x, f.name)) for f in dataclasses.fields(x)
                if f.name != "_index"}
    if isinstance(x, bytes):
        return x.hex()
    if isinstance(x, ipaddress.IPv4Address | ipaddress.IPv6Address | ipaddress.IPv4Network
                  | ipaddress.IPv6Network):
        return str(x)
    if isinstance(x, frozenset):
        return sorted((_canon(i) for i in x), key=json.dumps)
    if isinstance(x, list | tuple):
        return [_canon(i) for i in x]
    return x


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_tables_of_the_examples_are_unchanged(key: str) -> None:
    name, gateway, core = key.split(":")
    t = compile_tables(load_cluster(ROOT / "examples" / name), gateway, core == "True")
    assert isinstance(t, Tables)
    assert _canon(t) == GOLDEN[key]


def test_core_leaves_pool_prefixes_and_compact_hosts_out() -> None:
    c = load_cluster(ROOT / "examples" / "cluster.yaml")
    full, core = compile_tables(c, "gw-a"), compile_tables(c, "gw-a", core=True)
    assert len(c.hosts_compact) and len(core.hosts) < len(full.hosts)
    assert {str(r.prefix) for r in core.routes} == {
        str(r.prefix) for v in c.vpcs for r in v.routes}
    assert core.groups == full.groups and core.ports == full.ports
    with pytest.raises(KeyError):
        compile_tables(c, "gw-nope")


def test_compile_is_deterministic_and_order_independent():
    a = _tables(_intent())
    b = _tables(_intent(lambda d: d["vpcs"].reverse()))
    assert [v.vni for v in a.vpcs] == sorted(v.vni for v in a.vpcs)
    assert a.vpcs == b.vpcs
    assert set(a.routes) == set(b.routes)
    assert _tables(_intent()) == a


def test_vpc_entries():
    t = _tables(_intent())
    a, b, c = t.vpcs
    assert (a.name, a.prefix4, a.sf4) == (
        "tenant-a",
        ipaddress.ip_network("192.168.0.0/16"),
        ipaddress.ip_network("100.64.0.0/16"),
    )
    assert a.flags == (
        layout.CZ_VPC_HAS4 | layout.CZ_VPC_XLAT4 | layout.CZ_VPC_HAS6 | layout.CZ_VPC_XLAT6
    )
    assert b.prefix6 is None and b.flags == layout.CZ_VPC_HAS4 | layout.CZ_VPC_XLAT4
    assert c.identity and c.flags == layout.CZ_VPC_HAS4 and c.sf4 == c.prefix4
    assert a.plens4 == (24, 16) and a.plens6 == (48,)
    assert list(b.plens4) == sorted(b.plens4, reverse=True)


def test_routes_actions_and_groups():
    t = _tables(_intent())
    a = t.vpcs[0]
    by_prefix = {str(r.prefix): r for r in t.routes if r.vpc_id == a.vpc_id}
    assert by_prefix["172.16.99.0/24"].action == layout.CZ_ACT_BLACKHOLE
    assert by_prefix["172.16.98.0/24"].action == layout.CZ_ACT_SLOWPATH
    datasets = next(g for g in t.groups if g.name == "datasets")
    assert by_prefix["172.16.0.0/16"].group == datasets.group_id
    assert len(datasets.members) == 2 and set(datasets.buckets) == set(datasets.members)
    b_routes = {str(r.prefix) for r in t.routes if r.vpc_id == t.vpcs[1].vpc_id}
    assert b_routes == {"172.16.0.0/16", "fd10::/48", "172.17.0.0/16"}


def test_vteps_and_hosts():
    t = _tables(_intent())
    assert (1001, ipaddress.ip_address("10.1.0.2")) in t.vteps
    assert (1002, ipaddress.ip_address("10.1.0.2")) not in t.vteps
    assert len(t.hosts) == 5
    sf_vpcs = Counter(s.vpc_id for s in t.storage_facing)
    assert sf_vpcs == {0: 2, 1: 1, 2: 1}


def test_rendezvous_balance():
    buckets = rendezvous_buckets([(f"nh{i}", i) for i in range(4)], 256)
    counts = Counter(buckets)
    assert set(counts) == {0, 1, 2, 3}
    assert all(40 <= c <= 90 for c in counts.values()), counts


def test_removing_a_member_moves_only_its_buckets():
    members = [(f"nh{i}", i) for i in range(5)]
    before = rendezvous_buckets(members, 256)
    after = rendezvous_buckets([m for m in members if m[1] != 2], 256)
    moved = [b for b in range(256) if before[b] != after[b]]
    assert len(moved) == before.count(2) > 0
    assert all(before[b] == 2 for b in moved)


def test_adding_a_member_only_takes_buckets():
    members = [(f"nh{i}", i) for i in range(4)]
    before = rendezvous_buckets(members, 256)
    after = rendezvous_buckets(members + [("nh9", 9)], 256)
    moved = [b for b in range(256) if before[b] != after[b]]
    assert moved and all(after[b] == 9 for b in moved)
    assert 25 <= len(moved) <= 80


def test_empty_group():
    assert rendezvous_buckets([], 8) == (0,) * 8
