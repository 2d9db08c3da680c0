"""The intent (version 2, and version 1 migrated): valid files, one precise error per kind of
mistake, and fuzzing."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crosszone.compile.tables import compile_tables
from crosszone.intent.cluster import load_cluster, migrate_v1, parse_cluster, to_document
from crosszone.intent.errors import InvalidIntentError

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
V1 = ROOT / "examples" / "gateway.yaml"


def doc() -> dict:
    return yaml.safe_load(CLUSTER.read_text())


def test_example_is_valid() -> None:
    c = load_cluster(CLUSTER)
    assert [g.name for g in c.gateways] == ["gw-a", "gw-b"]
    assert len(c.storage_pools[1].prefixes) == 3


def test_version1_files_still_load_as_one_gateway() -> None:
    c = load_cluster(V1)
    assert [g.name for g in c.gateways] == ["gw-a"]
    assert c.version == 2 and c.gateways[0].bgp is None
    # Migrated to a plain version-2 document, which validates to the same cluster and tables.
    migrated = migrate_v1(yaml.safe_load(V1.read_text()))
    assert migrated["version"] == 2 and "gateway" not in migrated
    again = parse_cluster(yaml.safe_dump(migrated), "m.yaml")
    assert again == c
    assert compile_tables(again, "gw-a") == compile_tables(c, "gw-a")


def test_document_round_trip() -> None:
    c = load_cluster(CLUSTER)
    assert parse_cluster(yaml.safe_dump(to_document(c))) == c


def test_compact_block_error_names_the_line() -> None:
    text = CLUSTER.read_text().replace("172.18.1.0/24", "172.18.1.1/24")
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(text, "c.yaml")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "172.18.1.1/24" in ln)
    assert str(e.value).startswith(f"c.yaml:{line}: storage_pools[1].prefixes: ")
    assert "host bits" in str(e.value)


def _set(d: dict, path: tuple, value: object) -> dict:
    cur = d
    for p in path[:-1]:
        cur = cur[p]
    if value is _DEL:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return d


_DEL = object()

BAD = [
    # (description, path, value, expected where, expected text)
    ("unknown key", ("gateways", 0, "colour"), "red", "gateways[0].colour", "unknown key"),
    ("unknown top key", ("extra",), 1, "extra", "unknown key"),
    ("wrong type vni", ("vpcs", 0, "vni"), "1001", "vpcs[0].vni", "integer"),
    ("vni range", ("vpcs", 0, "vni"), 1 << 24, "vpcs[0].vni", "less than"),
    ("vni collision", ("vpcs", 1, "vni"), 1001, "vpcs[1].vni", "already used"),
    ("dup vpc name", ("vpcs", 1, "name"), "tenant-a", "vpcs[1].name", "already used"),
    ("dup gateway", ("gateways", 1, "name"), "gw-a", "gateways[1].name", "already used"),
    ("sf collision", ("vpcs", 1, "storage_facing"), ["100.64.0.0/16"],
     "vpcs[1].storage_facing[0]", "overlaps"),
    ("sf length", ("vpcs", 1, "storage_facing"), ["100.65.0.0/24"],
     "vpcs[1].storage_facing[0]", "length"),
    ("host outside", ("hosts", 0, "addresses"), ["10.9.9.9"], "hosts[0].addresses[0]",
     "outside"),
    ("host dangling vpc", ("hosts", 0, "vpc"), "nope", "hosts[0].vpc", "no VPC"),
    ("pool dangling", ("vpcs", 0, "storage_pools"), ["nope"], "vpcs[0].storage_pools[0]",
     "no storage pool"),
    ("route pool dangling", ("vpcs", 0, "routes"), [{"prefix": "10.1.0.0/16",
                                                     "action": "forward", "pool": "x"}],
     "vpcs[0].routes[0].pool", "no storage pool"),
    ("nexthop interface", ("storage_pools", 0, "next_hops", 0, "interface"), "eth9",
     "storage_pools[0].next_hops[0].interface", "no interface"),
    ("duplicate route", ("storage_pools", 1, "prefixes"), "172.16.0.0/16",
     "storage_pools", "defined twice"),
    ("route overlaps own space", ("storage_pools", 1, "prefixes"), "192.168.7.0/24",
     "storage_pools[1].prefixes", "overlaps the address space"),
    ("bad prefix", ("storage_pools", 0, "prefixes"), ["172.16.0.1/16"],
     "storage_pools[0].prefixes", "prefix #0"),
    ("bad compact token", ("storage_pools", 1, "prefixes"), "10.0.0.0/8 banana",
     "storage_pools[1].prefixes", "prefix #1"),
    ("octet", ("storage_pools", 1, "prefixes"), "10.0.0.0/8 300.0.0.0/8",
     "storage_pools[1].prefixes", "above 255"),
    ("no compute", ("gateways", 0, "interfaces", 0, "role"), "storage",
     "gateways[0].interfaces", "compute"),
    ("no next hop mac", ("gateways", 1, "interfaces", 0, "next_hop_mac"), _DEL,
     "gateways[1].interfaces[0].next_hop_mac", "next_hop_mac"),
    ("bad mac", ("vpcs", 0, "router_mac"), "zz", "vpcs[0].router_mac", "MAC"),
    ("vtep v6", ("gateways", 0, "vtep"), "fd00::1", "gateways[0].vtep", "IPv4"),
    ("missing vpcs", ("vpcs",), _DEL, "vpcs", "missing"),
    ("policy range", ("policy", "small_dscp"), 64, "policy.small_dscp", "less than"),
    ("bgp asn", ("gateways", 0, "bgp", "asn"), 0, "gateways[0].bgp.asn", "greater"),
    ("pool listed twice", ("vpcs", 1, "storage_pools"), ["datasets", "datasets"],
     "vpcs[1].storage_pools", "twice"),
    ("empty pool", ("storage_pools", 0, "prefixes"), [], "storage_pools[0].prefixes",
     "at least one"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_rejected_with_file_line_object_field(case: tuple) -> None:
    _, path, value, where, text = case
    d = _set(doc(), path, value)
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(yaml.safe_dump(d, sort_keys=False), "x.yaml")
    msg = str(e.value)
    assert msg.startswith("x.yaml:"), msg
    assert e.value.where is not None and e.value.where.startswith(where), msg
    assert text in msg, msg
    assert e.value.line is not None, msg


@pytest.mark.parametrize("text", ["", "[]", "version: 3", "version: 2", "{", "a: [",
                                  "version: 2\ngateways: 5", "\x00", "version: 1"])
def test_garbage_is_one_error_type(text: str) -> None:
    with pytest.raises(InvalidIntentError):
        parse_cluster(text, "g.yaml")


def test_too_many_vpcs() -> None:
    d = doc()
    base = d["vpcs"][1]
    d["vpcs"] = [dict(base, name=f"v{i}", vni=10 + i, storage_facing="identity",
                      prefixes=[f"10.{i // 256}.{i % 256}.0/24"], storage_pools=[])
                 for i in range(4097)]
    d["hosts"] = []
    with pytest.raises(InvalidIntentError, match="the tables hold 4096"):
        parse_cluster(yaml.safe_dump(d), "x.yaml")


def test_check_command(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from crosszone.cli import app

    r = CliRunner().invoke(app, ["check", str(CLUSTER)])
    assert r.exit_code == 0 and "valid" in r.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLUSTER.read_text().replace("vni: 1002", "vni: 1001"))
    r = CliRunner().invoke(app, ["check", str(bad)])
    assert r.exit_code == 2


_TEXT = CLUSTER.read_text()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, len(_TEXT) - 1), st.integers(0, 40), st.text(max_size=12))
def test_fuzz_mutations_raise_only_the_project_error(pos: int, cut: int, insert: str) -> None:
    text = _TEXT[:pos] + insert + _TEXT[pos + cut:]
    with contextlib.suppress(InvalidIntentError):
        parse_cluster(text, "f.yaml")


@settings(max_examples=100, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(
                        st.sampled_from(["version", "gateways", "vpcs", "hosts", "name",
                                         "prefixes", "storage_pools", "vni"]), c, max_size=4),
                    max_leaves=20))
def test_fuzz_structures_raise_only_the_project_error(data: object) -> None:
    if isinstance(data, dict):
        data.setdefault("version", 2)
    with contextlib.suppress(InvalidIntentError):
        parse_cluster(yaml.safe_dump(data), "f.yaml")


# --- compact hosts (hosts_compact: one line per host) -------------------------------------

def _compact_doc(extra: str = "") -> str:
    d = doc()
    hosts = d.pop("hosts")
    block = d.pop("hosts_compact")
    text = yaml.safe_dump(d, sort_keys=False)
    lines = [f"  {h['name']} {h['vpc']} {h['vtep']} {h['mac']} {','.join(h['addresses'])}"
             for h in hosts] + ["  " + ln for ln in block.splitlines()]
    return text + "hosts_compact: |\n" + "\n".join(lines) + "\n" + extra


def test_compact_hosts_compile_like_verbose_ones() -> None:
    from crosszone.compile.gateway import compile_gateway
    from crosszone.store.objects import join_objects, split_cluster

    verbose, compact = load_cluster(CLUSTER), parse_cluster(_compact_doc())
    assert len(verbose.hosts) == 2 and len(verbose.hosts_compact) == 1
    assert len(compact.hosts) == 0 and len(compact.hosts_compact) == 3
    ev = compile_gateway(verbose, "gw-a", lambda n: 1).entries
    ec = compile_gateway(compact, "gw-a", lambda n: 1).entries
    assert ev == ec
    tc, tv = compile_tables(compact, "gw-b"), compile_tables(verbose, "gw-b")
    assert tc.hosts == tv.hosts and tc.vteps == tv.vteps
    assert parse_cluster(yaml.safe_dump(to_document(compact))) == compact
    objs = split_cluster(compact)
    assert any(k.startswith("hosts/") for k in objs)
    assert join_objects(objs).hosts_compact == compact.hosts_compact


COMPACT_BAD = [
    # (line appended to the block, where, text)
    ("  h3 tenant-a 10.1.0.3 02:00:00:01:00:03", "hosts_compact[3]", "4 fields"),
    ("  h3 tenant-a 10.1.0.300 02:00:00:01:00:03 192.168.1.11", "hosts_compact[3].vtep",
     "IPv4"),
    ("  h3 tenant-a fd00::1 02:00:00:01:00:03 192.168.1.11", "hosts_compact[3].vtep", "IPv4"),
    ("  h3 tenant-a 10.1.0.3 02:00:00:01:00 192.168.1.11", "hosts_compact[3].mac", "MAC"),
    ("  h/3 tenant-a 10.1.0.3 02:00:00:01:00:03 192.168.1.11", "hosts_compact[3].name",
     "not a name"),
    ("  h3 tenant-a 10.1.0.3 02:00:00:01:00:03 192.168.1.x", "hosts_compact[3].addresses",
     "not an IP"),
    ("  h3 nope 10.1.0.3 02:00:00:01:00:03 192.168.1.11", "hosts_compact[3].vpc", "no VPC"),
    ("  h3 tenant-a 10.1.0.3 02:00:00:01:00:03 10.9.9.9", "hosts_compact[3].addresses",
     "outside"),
    ("  h3 tenant-a 10.1.0.3 02:00:00:01:00:03 fd00:b::1", "hosts_compact[3].addresses",
     "outside"),
    ("  h3 tenant-a 10.1.0.3 02:00:00:01:00:03 192.168.1.10", "hosts_compact[3].addresses",
     "already used by hosts_compact[0]"),
    ("  h3 tenant-a 10.1.0.3 02:00:00:01:00:03 fd00:a::10", "hosts_compact[3].addresses",
     "already used by hosts_compact[0]"),
    ("  gpu1-a tenant-a 10.1.0.3 02:00:00:01:00:03 192.168.1.11", "hosts_compact[3].name",
     "already used"),
]


@pytest.mark.parametrize("case", COMPACT_BAD, ids=[c[1] + ":" + c[2] for c in COMPACT_BAD])
def test_compact_host_errors_name_file_line_host_field(case: tuple) -> None:
    line_text, where, text = case
    src = _compact_doc("  # a comment line, skipped\n" + line_text + "\n")
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(src, "h.yaml")
    msg = str(e.value)
    line = src.splitlines().index(line_text) + 1
    assert msg.startswith(f"h.yaml:{line}: {where}"), msg
    assert text in msg, msg


def test_compact_hosts_collide_with_verbose_ones() -> None:
    src = CLUSTER.read_text().replace(
        "hosts_compact: |\n", "hosts_compact: |\n  h9 tenant-b 10.1.0.9 02:00:00:01:00:09 "
        "192.168.1.10\n")
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(src, "h.yaml")
    assert "hosts_compact[0].addresses" in str(e.value) and "hosts[1]" in str(e.value)


def test_compact_hosts_at_scale() -> None:
    # how fast is `crosszone bench control`'s business (no timed assertion in a test)
    from crosszone_lab.bench.control import synthetic

    c = parse_cluster(synthetic(1000, 100_000), "big.yaml")
    assert len(c.hosts_compact) == 100_000


def test_names_twice_inside_a_gateway_or_pool_give_their_own_line() -> None:
    # the section of such a name is a path (gateways, 1, interfaces), so its line is found
    d = doc()
    d["gateways"][1]["interfaces"][1]["name"] = d["gateways"][1]["interfaces"][0]["name"]
    src = yaml.safe_dump(d, sort_keys=False)
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(src, "x.yaml")
    assert e.value.where == "gateways[1].interfaces[1].name", str(e.value)
    assert "already used by gateways[1].interfaces[0]" in str(e.value)
    assert "- name: " in src.splitlines()[e.value.line - 1] and e.value.line > 1
    d = doc()
    d["storage_pools"][0]["next_hops"].append(dict(d["storage_pools"][0]["next_hops"][0]))
    src = yaml.safe_dump(d, sort_keys=False)
    with pytest.raises(InvalidIntentError) as e:
        parse_cluster(src, "x.yaml")
    n = len(d["storage_pools"][0]["next_hops"]) - 1
    assert e.value.where == f"storage_pools[0].next_hops[{n}].name", str(e.value)
    assert e.value.line > 1 and "name" in src.splitlines()[e.value.line - 1]
