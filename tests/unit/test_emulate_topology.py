"""Topology validation: unknown keys, bad values and cross-field rules are clear errors."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hs

from crosszone_lab.emulate import topology

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
VPCS = [{"name": "a", "vni": 1001, "prefix": "192.168.0.0/16", "storage_facing": "100.64.0.0/16"}]


def test_shipped_topologies_load() -> None:
    for name in ("two-zone.yaml", "emulate-small.yaml"):
        p = topology.plan(topology.load(ROOT / "examples" / name))
        assert len(set(p.namespaces)) == len(p.namespaces)
        assert all(ns.startswith(topology.PREFIX) for ns in p.namespaces)
        names = [(link.a_ns, link.a_name) for link in p.links]
        names += [(link.b_ns, link.b_name) for link in p.links]
        assert len(set(names)) == len(names)
        assert all(len(n) <= 15 for _, n in names)


def test_default_overlaps() -> None:
    spec = topology.load(ROOT / "examples" / "two-zone.yaml")
    assert spec.vpcs[0].prefix == spec.vpcs[1].prefix
    assert spec.hosts == 4 and spec.gateways.crosszone == 2 and spec.gateways.legacy == 2


@pytest.mark.parametrize("doc, needle", [
    ({"vpcs": VPCS, "colour": "red"}, "colour"),
    ({"vpcs": VPCS, "gateways": {"legacy": 0, "crosszone": 0}}, "at least one gateway"),
    ({"vpcs": VPCS, "hosts": 0}, "hosts"),
    ({"vpcs": [{**VPCS[0], "storage_facing": "100.64.0.0/17"}]}, "same length"),
    ({"vpcs": VPCS * 2}, "unique"),
    ({"vpcs": [{**VPCS[0], "vni": 0}]}, "vni"),
    ({"vpcs": [{**VPCS[0], "name": "TOO-LONG"}]}, "name"),
    ({"vpcs": VPCS, "storage": {"nodes": 2, "disks": 3}}, "disks"),
    ({"vpcs": VPCS, "active": "all"}, "active"),
    ({}, "vpcs"),
    ({"vpcs": [{**VPCS[0], "prefix6": "fd00:a::/64"}]}, "go together"),
    ({"vpcs": [{**VPCS[0], "prefix6": "fd00:a::/64", "storage_facing6": "fd64:a::/56"}]},
     "same length"),
    ({"vpcs": [{**VPCS[0], "prefix6": "fd00:a::/120", "storage_facing6": "fd64:a::/120"}]},
     "/112"),
    ({"vpcs": [{**VPCS[0], "prefix6": "10.0.0.0/8", "storage_facing6": "fd64:a::/64"}]},
     "prefix6"),
    ({"vpcs": VPCS, "underlay_mtu": 9001}, "underlay_mtu"),
])
def test_rejects(doc: dict[str, object], needle: str) -> None:
    with pytest.raises(topology.TopologyError) as err:
        topology.parse(doc, source="t.yaml")
    assert "t.yaml" in str(err.value) and needle in str(err.value)


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text("hosts: [\n")
    with pytest.raises(topology.TopologyError, match=r"bad\.yaml"):
        topology.load(f)


@settings(max_examples=200, deadline=None)
@given(hs.recursive(hs.none() | hs.integers() | hs.text(max_size=5),
                    lambda c: hs.lists(c, max_size=3) | hs.dictionaries(hs.text(max_size=8), c,
                                                                       max_size=3)))
def test_fuzz_only_topology_error_escapes(doc: object) -> None:
    with contextlib.suppress(topology.TopologyError):
        topology.parse(yaml.safe_load(yaml.safe_dump(doc)))


def test_ipv6_and_jumbo_plan() -> None:
    spec = topology.parse({"vpcs": [{**VPCS[0], "prefix6": "fd00:a::/64",
                                      "storage_facing6": "fd64:a::/64"}],
                           "underlay_mtu": 9000, "hosts": 2})
    p = topology.plan(spec)
    assert p.ipv6 and p.inner_mtu == 8950
    assert [e.addr6 for e in p.endpoints] == ["fd00:a::10a", "fd00:a::20a"]
    assert {link.mtu for link in p.links} == {9000, 8950}
