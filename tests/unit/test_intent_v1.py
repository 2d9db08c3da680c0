"""Version-1 files through the one model: migrated when read, then the same schema and checker.

Every check that used to run only on version-1 files (the old `intent.validate.check`) has a case
here, so the merged checker is seen to keep it; each error still names the file, the line, and the
object and field as the version-1 file has them (`gateway.interfaces[0]`, not `gateways[0]...`).
The same mistake in the migrated document is rejected with the version-2 path: one checker.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crosszone.abi import layout
from crosszone.intent.cluster import load_cluster, migrate_v1, only_gateway, parse_cluster
from crosszone.intent.errors import InvalidIntentError

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "examples" / "gateway.yaml"
_DEL = object()


def v1_doc() -> dict:
    return yaml.safe_load(V1.read_text())


def _set(d: dict, path: tuple, value: object) -> dict:
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    if value is _DEL:
        del cur[path[-1]]
    elif callable(value):
        cur[path[-1]] = value(copy.deepcopy(cur[path[-1]]))
    else:
        cur[path[-1]] = value
    return d


def _many_ports(itfs: list) -> list:
    return itfs + [{"name": f"st{i}", "role": "storage", "mac": "02:00:00:00:20:02"}
                   for i in range(layout.CZ_MAX_PORTS)]


def _many_nexthops(nhs: list) -> list:
    return [{"name": f"n{i}", "interface": "storage0", "mac": "02:00:00:00:30:01"}
            for i in range(layout.CZ_MAX_NEXTHOPS + 1)]


def _many_plens6(routes: list) -> list:
    return routes + [{"prefix": f"fd20::/{n}", "action": "drop"}
                     for n in range(16, 17 + layout.CZ_MAX_PLENS6)]


# (description, path, value, where, text in the message, text on the reported line: for a
# list, its first item's)
BAD_V1 = [
    ("interface name twice", ("gateway", "interfaces", 1, "name"), "compute0",
     "gateway.interfaces[1].name", "already used by gateway.interfaces[0]", "compute0"),
    ("no compute interface", ("gateway", "interfaces", 0, "role"), "storage",
     "gateway.interfaces", "exactly one interface must have role compute", "compute0"),
    ("compute without next hop mac", ("gateway", "interfaces", 0, "next_hop_mac"), _DEL,
     "gateway.interfaces[0].next_hop_mac", "needs next_hop_mac", "compute0"),
    ("too many ports", ("gateway", "interfaces"), _many_ports,
     "gateway.interfaces", f"more than {layout.CZ_MAX_PORTS} ports", "compute0"),
    ("vpc name twice", ("vpcs", 1, "name"), "tenant-a", "vpcs[1].name", "already used",
     "tenant-a"),
    ("vni twice", ("vpcs", 1, "vni"), 1001, "vpcs[1].vni", "already used by vpcs[0]", "1001"),
    ("pool name twice", ("storage_pools", 1, "name"), "datasets", "storage_pools[1].name",
     "already used", "datasets"),
    ("host name twice", ("hosts", 1, "name"), "gpu1-a", "hosts[1].name", "already used",
     "gpu1-a"),
    ("next hop name twice", ("storage_pools", 0, "next_hops", 1, "name"), "st-r1",
     "storage_pools[0].next_hops[1].name", "already used", "st-r1"),
    ("too many next hops", ("storage_pools", 0, "next_hops"), _many_nexthops,
     "storage_pools", "the tables hold", "datasets"),
    ("next hop on no interface", ("storage_pools", 0, "next_hops", 0, "interface"), "eth9",
     "storage_pools[0].next_hops[0].interface", "no interface 'eth9'", "eth9"),
    ("second IPv4 prefix", ("vpcs", 2, "prefixes"), ["10.200.0.0/16", "10.201.0.0/16"],
     "vpcs[2].prefixes[1]", "a second IPv4 prefix", "10.201.0.0/16"),
    ("storage-facing family missing", ("vpcs", 1, "storage_facing"), ["fd64:b::/64"],
     "vpcs[1].storage_facing[0]", "no IPv6 VPC prefix", "fd64:b::/64"),
    ("storage-facing length", ("vpcs", 1, "storage_facing"), ["100.65.0.0/24"],
     "vpcs[1].storage_facing[0]", "length", "100.65.0.0/24"),
    ("storage-facing for one family of two", ("vpcs", 0, "storage_facing"), ["100.64.0.0/16"],
     "vpcs[0].storage_facing", "one storage-facing prefix per VPC prefix", "100.64.0.0/16"),
    ("storage-facing overlap", ("vpcs", 1, "storage_facing"), ["100.64.0.0/16"],
     "vpcs[1].storage_facing[0]", "overlaps", "100.64.0.0/16"),
    ("dangling pool", ("vpcs", 1, "storage_pools"), ["nope"], "vpcs[1].storage_pools[0]",
     "no storage pool 'nope'", "nope"),
    ("forward route without pool", ("vpcs", 0, "routes", 0, "action"), "forward",
     "vpcs[0].routes[0].pool", "needs a pool", "172.16.99.0/24"),
    ("drop route with pool", ("vpcs", 0, "routes", 0, "pool"), "datasets",
     "vpcs[0].routes[0].pool", "takes no pool", "datasets"),
    ("route to no pool", ("vpcs", 0, "routes"), [{"prefix": "172.30.0.0/16",
                                                  "action": "forward", "pool": "x"}],
     "vpcs[0].routes[0].pool", "no storage pool 'x'", "pool: x"),
    ("route twice", ("vpcs", 0, "routes", 1, "prefix"), "172.16.0.0/16",
     "vpcs[0].routes[1].prefix", "defined twice", "172.16.0.0/16"),
    ("too many IPv6 lengths", ("vpcs", 0, "routes"), _many_plens6, "vpcs[0].routes",
     "distinct IPv6 prefix lengths", "172.16.99.0/24"),
    ("host in no VPC", ("hosts", 0, "vpc"), "nope", "hosts[0].vpc", "no VPC named 'nope'",
     "nope"),
    ("host outside its VPC", ("hosts", 0, "addresses"), ["10.9.9.9"],
     "hosts[0].addresses[0]", "outside every prefix of VPC tenant-a", "10.9.9.9"),
    ("host address twice", ("hosts", 1, "addresses"), ["192.168.1.10"],
     "hosts[1].addresses[0]", "already used by hosts[0]", "192.168.1.10"),
    ("bad prefix item", ("storage_pools", 0, "prefixes"), ["172.16.0.0/16", "172.16.0.1/16"],
     "storage_pools[0].prefixes[1]", "host bits", "172.16.0.1/16"),
    ("bad vtep", ("gateway", "vtep"), "fd00::1", "gateway.vtep", "IPv4", "fd00::1"),
    ("unknown gateway key", ("gateway", "colour"), "red", "gateway.colour", "unknown key",
     "colour"),
    # checks of the cluster checker that now also apply to version-1 files
    ("route in the VPC's own space", ("vpcs", 0, "routes", 0, "prefix"), "192.168.7.0/24",
     "vpcs[0].routes[0].prefix", "overlaps the address space", "192.168.7.0/24"),
    ("pool listed twice", ("vpcs", 1, "storage_pools"), ["datasets", "datasets"],
     "vpcs[1].storage_pools", "listed twice", "datasets"),
]


def _dump(d: dict) -> str:
    return yaml.safe_dump(d, sort_keys=False)


@pytest.mark.parametrize("case", BAD_V1, ids=[c[0] for c in BAD_V1])
def test_v1_rejected_with_file_line_object_field(case: tuple) -> None:
    _, path, value, where, text, on_line = case
    src = _dump(_set(v1_doc(), path, value))
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(src, "v1.yaml")
    msg = str(e.value)
    assert e.value.where == where, msg
    assert text in msg, msg
    assert msg.startswith(f"v1.yaml:{e.value.line}: {where}: "), msg
    assert on_line in src.splitlines()[e.value.line - 1], msg


@pytest.mark.parametrize("case", BAD_V1, ids=[c[0] for c in BAD_V1])
def test_the_migrated_document_is_rejected_by_the_same_checker(case: tuple) -> None:
    _, path, value, where, text, _ = case
    doc = migrate_v1(_set(v1_doc(), path, value))
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(_dump(doc), "v2.yaml")
    want = where.replace("gateway.", "gateways[0].", 1)
    # a bad item of a prefix list: version 2 names the list and the item's number
    assert e.value.where in (want, want.rsplit("[", 1)[0]), str(e.value)
    assert text.replace("gateway.", "gateways[0].") in str(e.value)


# What version 2 added is still not version 1: such a file is rejected, not half-read.
V2_ONLY = [
    (("policy",), {"small_dscp": 10}, "policy", "unknown key 'policy'"),
    (("hosts_compact",), "h9 tenant-a 10.1.0.9 02:00:00:01:00:09 192.168.1.19\n",
     "hosts_compact", "unknown key"),
    (("gateways",), [], "gateways", "unknown key"),
    (("gateway", "bgp"), {"asn": 65000, "router_id": "10.0.0.1"}, "gateway.bgp",
     "unknown key 'bgp'"),
    (("storage_pools", 0, "prefixes"), "172.16.0.0/16 fd10::/48", "storage_pools[0].prefixes",
     "valid list"),
    (("gateway",), _DEL, "gateway", "missing required key 'gateway'"),
]


@pytest.mark.parametrize("case", V2_ONLY, ids=[c[2] for c in V2_ONLY])
def test_version2_fields_in_a_version1_file(case: tuple) -> None:
    path, value, where, text = case
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(_dump(_set(v1_doc(), path, value)), "v1.yaml")
    assert e.value.where == where and text in str(e.value), str(e.value)
    assert e.value.line is not None


def test_version_must_be_the_integer_1_or_2() -> None:
    for bad in ("true", "1.0", "'1'"):
        with pytest.raises(InvalidIntentError, match="version"):
            parse_cluster(V1.read_text().replace("version: 1", f"version: {bad}"), "v.yaml")


def test_migrated_document_keeps_every_field() -> None:
    d = v1_doc()
    m = migrate_v1(d)
    assert m["gateways"] == [d["gateway"]] and m["version"] == 2
    assert {k: v for k, v in m.items() if k not in ("gateways", "version")} == {
        k: v for k, v in d.items() if k not in ("gateway", "version")}
    assert d["version"] == 1 and "gateway" in d  # the input is not changed


def test_only_gateway() -> None:
    one = load_cluster(V1)
    two = load_cluster(ROOT / "examples" / "cluster.yaml")
    assert only_gateway(one, None) == "gw-a"
    assert only_gateway(two, "gw-b") == "gw-b"
    with pytest.raises(InvalidIntentError, match="2 gateways"):
        only_gateway(two, None, "c.yaml")
    with pytest.raises(InvalidIntentError, match="no gateway 'gw-x'"):
        only_gateway(two, "gw-x", "c.yaml")


def test_fastpath_run_needs_a_gateway_for_a_cluster(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crosszone.cli import app

    pcap = tmp_path / "in.pcap"
    pcap.write_bytes(b"")
    args = ["fastpath", "run", "--model", "--intent", str(ROOT / "examples" / "cluster.yaml"),
            "--pcap", str(pcap), "--out", str(tmp_path / "out.pcap")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "--gateway" in r.output, r.output
    r = CliRunner().invoke(app, [*args, "--gateway", "gw-x"])
    assert r.exit_code == 2 and "no gateway 'gw-x'" in r.output, r.output


_TEXT = V1.read_text()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(_TEXT) - 1), st.integers(0, 40), st.text(max_size=12))
def test_fuzz_v1_mutations_raise_only_the_project_error(pos: int, cut: int, insert: str) -> None:
    text = _TEXT[:pos] + insert + _TEXT[pos + cut:]
    with contextlib.suppress(InvalidIntentError):
        parse_cluster(text, "f.yaml")


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from(["version", "gateway", "gateways", "vpcs", "hosts",
                                         "name", "prefixes", "storage_pools", "interfaces",
                                         "bgp", "policy", "hosts_compact"]), c, max_size=4),
                    max_leaves=20))
def test_fuzz_v1_structures_raise_only_the_project_error(data: object) -> None:
    if isinstance(data, dict):
        data["version"] = 1
    with contextlib.suppress(InvalidIntentError):
        parse_cluster(yaml.safe_dump(data), "f.yaml")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([c[1:3] for c in BAD_V1]), st.booleans())
def test_any_v1_mistake_in_either_version_is_one_error(case: tuple, migrate: bool) -> None:
    path, value = case
    d = _set(v1_doc(), path, value)
    with pytest.raises(InvalidIntentError):
        parse_cluster(_dump(migrate_v1(d) if migrate else d), "f.yaml")
