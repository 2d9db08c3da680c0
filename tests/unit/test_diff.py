"""compile.diff and the agent's reconciler: minimal, make-before-break, delta == full."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from crosszone.agent.reconcile import Reconciler
from crosszone.compile.diff import DictSink, apply_to, count, diff, diff_entries
from crosszone.compile.encode import bind_ports, encode_tables
from crosszone.compile.gateway import Ids, compile_gateway
from crosszone.compile.tables import compile_tables
from crosszone.intent.cluster import load_cluster, parse_cluster, to_document
from crosszone.intent.schema import Cluster
from crosszone.store.objects import diff_objects, split_cluster
from crosszone.store.store import Event

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
IFX = (lambda name: 5)  # noqa: E731


def cluster_with(**edits: object):
    d = to_document(load_cluster(CLUSTER))
    for fn in edits.values():
        fn(d)  # type: ignore[operator]
    return parse_cluster(yaml.safe_dump(d))


def same_state(have: dict, want: dict) -> bool:
    """Maps equal; array maps compared on the wanted slots."""
    from crosszone.compile.diff import ARRAY_MAPS
    for name in set(have) | set(want):
        h, w = have.get(name, {}), want.get(name, {})
        if name in ARRAY_MAPS:
            if {k: h.get(k) for k in w} != w:
                return False
        elif h != w:
            return False
    return True


def _invariants(step: dict, old: dict, new: dict) -> None:
    """No route in both old and new is ever missing; no route points at a missing group."""
    for fam in ("routes4", "routes6"):
        for k in old.get(fam, {}).keys() & new.get(fam, {}).keys():
            assert k in step.get(fam, {}), f"live route {k.hex()} missing mid-change"
        for v in step.get(fam, {}).values():
            group = int.from_bytes(v[4:8], "little")
            action = int.from_bytes(v[0:4], "little")
            if action == 1:
                assert group.to_bytes(4, "little") in step["ecmp_groups"]


def test_same_intent_no_ops() -> None:
    t = compile_tables(load_cluster(CLUSTER), "gw-a")
    assert diff(t, t) == []


def test_empty_gateway_all_puts_in_dependency_order() -> None:
    t = compile_tables(load_cluster(CLUSTER), "gw-a")
    ops = diff(None, t)
    order = [op.map for op in ops]
    assert order.index("ecmp_groups") < order.index("routes4") < order.index("vpc_by_vni")
    assert all(op.kind == "put" for op in ops)


def test_only_changed_entries() -> None:
    a = compile_gateway(load_cluster(CLUSTER), "gw-a", IFX)
    b = compile_gateway(cluster_with(x=lambda d: d["storage_pools"][1].__setitem__(
        "prefixes", d["storage_pools"][1]["prefixes"] + "\n10.77.0.0/16")), "gw-a", IFX, a.ids)
    ops = diff_entries(a.entries, b.entries)
    assert [(op.map, op.kind, len(op)) for op in ops] == [("routes4", "put", 1)]


def test_removal_deletes_last_and_vpc_first() -> None:
    a = compile_gateway(load_cluster(CLUSTER), "gw-a", IFX)

    def drop(d: dict) -> None:
        d["vpcs"][0]["routes"] = []
    b = compile_gateway(cluster_with(x=drop), "gw-a", IFX, a.ids)
    ops = diff_entries(a.entries, b.entries)
    kinds = [op.kind for op in ops]
    assert kinds == sorted(kinds, key=lambda k: k == "delete")  # every put before any delete


def test_stable_ids_when_a_low_vni_appears() -> None:
    a = compile_gateway(load_cluster(CLUSTER), "gw-a", IFX)

    def add(d: dict) -> None:
        d["vpcs"].insert(0, {"name": "early", "vni": 5, "prefixes": ["10.50.0.0/16"],
                             "storage_facing": "identity", "router_mac": "02:00:00:00:ee:01",
                             "storage_pools": ["datasets"]})
    b = compile_gateway(cluster_with(x=add), "gw-a", IFX, a.ids)
    assert b.ids.vpcs["tenant-a"] == a.ids.vpcs["tenant-a"]
    assert b.ids.vpcs["early"] == 2
    ops = diff_entries(a.entries, b.entries)
    assert count(ops)["delete"] == 0  # nobody else's routes were re-keyed


def test_ids_round_trip() -> None:
    ids = Ids({"a": 1}, {"p": 0}, {"p/n": 3})
    assert Ids.from_json(ids.to_json()) == ids


def changed_clusters(seed: int) -> tuple[Cluster, Cluster]:
    """A random cluster and a random change of it (pool prefixes and lengths, a next hop added,
    maybe an explicit route dropped): the pair the diff and sink tests replay."""
    rnd = random.Random(seed)
    d = to_document(load_cluster(CLUSTER))
    pools = d["storage_pools"]
    pools[0]["prefixes"] = "\n".join(f"172.16.{i}.0/24" for i in rnd.sample(range(90), 40))
    pools[1]["prefixes"] = "\n".join(f"172.{20 + i // 200}.{i % 200}.0/24"
                                     for i in rnd.sample(range(400), 40))
    old = parse_cluster(yaml.safe_dump(d))
    pools[0]["prefixes"] = "\n".join(f"172.16.{i}.0/{rnd.choice([24, 25])}"
                                     for i in rnd.sample(range(90), 30))
    pools[1]["next_hops"] = pools[1]["next_hops"] + [
        {"name": "ck-r2", "interface": "storage0", "mac": "02:00:00:00:31:02"}]
    if rnd.random() < 0.5:
        d["vpcs"][0]["routes"] = d["vpcs"][0]["routes"][:1]
    return old, parse_cluster(yaml.safe_dump(d))


@pytest.mark.parametrize("seed", range(6))
def test_random_changes_keep_invariants_and_reach_target(seed: int) -> None:
    old, new = changed_clusters(seed)
    a = compile_gateway(old, "gw-a", IFX)
    b = compile_gateway(new, "gw-a", IFX, a.ids)
    ops = diff_entries(a.entries, b.entries)
    state = {k: dict(v) for k, v in a.entries.items()}
    for step in apply_to(state, ops):
        _invariants(step, a.entries, b.entries)
    assert same_state(state, b.entries)


def test_compile_gateway_matches_compile_tables() -> None:
    c = load_cluster(CLUSTER)
    for gw in ("gw-a", "gw-b"):
        ref = bind_ports(compile_tables(c, gw), IFX)
        assert compile_gateway(c, gw, IFX).entries == encode_tables(ref)


def _events(rev: int, old: dict, new: dict) -> list[Event]:
    return [Event(rev, k, v) for k, v in diff_objects(old, new).writes.items()]


def _loaded() -> tuple:
    """(cluster, its objects, sink, reconciler) with the example cluster applied at revision 1."""
    c = load_cluster(CLUSTER)
    o1 = split_cluster(c)
    sink = DictSink()
    r = Reconciler("gw-a", sink, IFX)
    r.load(o1, 1)
    return c, o1, sink, r


def test_reconciler_delta_equals_full_and_restart_writes_nothing() -> None:
    c = load_cluster(CLUSTER)
    o1 = split_cluster(c)
    sink = DictSink()
    r = Reconciler("gw-a", sink, IFX)
    assert r.load(o1, 1).mode == "full"
    d = to_document(c)
    d["storage_pools"][1]["prefixes"] += "\n10.99.0.0/24\n10.98.0.0/23"
    c2 = parse_cluster(yaml.safe_dump(d))
    o2 = split_cluster(c2)
    res = r.on_events(_events(2, o1, o2))
    assert res is not None and res.mode == "delta" and res.puts >= 2
    assert same_state(sink.entries, compile_gateway(c2, "gw-a", IFX).entries)
    # A restarted agent reads the maps and finds nothing to do.
    r2 = Reconciler("gw-a", DictSink(sink.entries), IFX, ids=r.ids)
    again = r2.load(o2, 2, actual=lambda wanted: {k: dict(v) for k, v in sink.entries.items()})
    assert (again.puts, again.deletes) == (0, 0)


def test_bad_revision_rejected_last_state_kept() -> None:
    _, _, sink, r = _loaded()
    before = {k: dict(v) for k, v in sink.entries.items()}
    res = r.on_events([Event(2, "core", b"{not json")])
    assert res is not None and res.mode == "rejected"
    assert r.revision == 1 and r.rejected == 1 and "rejected" in (r.last_error or "")
    assert sink.entries == before
    res = r.on_events([Event(3, "pool/checkpoints/007", b"10.0.0.1/8")])
    assert res is not None and res.mode == "rejected"


def test_rejected_revision_is_judged_once_and_repaired_by_the_next() -> None:
    c, o1, sink, r = _loaded()
    assert r.on_events([Event(2, "core", b"{not json")]).mode == "rejected"  # type: ignore[union-attr]
    assert (r.revision, r.seen, r.rejected) == (1, 2, 1)
    # the repair arrives alone: it applies on top of revision 2, not of the last good one
    d = to_document(c)
    d["storage_pools"][1]["prefixes"] += "\n10.99.0.0/24"
    o3 = split_cluster(parse_cluster(yaml.safe_dump(d)))
    res = r.on_events(_events(3, o1, o3) + [Event(3, "core", o1["core"])])
    assert res is not None and res.mode == "full" and (r.revision, r.seen, r.rejected) == (3, 3, 1)
    assert same_state(sink.entries, compile_gateway(parse_cluster(yaml.safe_dump(d)), "gw-a",
                                                    IFX, r.ids).entries)


def test_gateway_missing_from_intent_is_rejected() -> None:
    r = Reconciler("gw-z", DictSink(), IFX)
    assert r.load(split_cluster(load_cluster(CLUSTER)), 1).mode == "rejected"


def test_host_and_vtep_encoders_match_hand_built_c_layouts() -> None:
    import ipaddress
    import struct

    from crosszone.compile.encode import encode_hosts, encode_vteps
    from crosszone.compile.tables import HostEntry

    hosts = [HostEntry(3, ipaddress.ip_address("192.168.1.10"),
                       ipaddress.IPv4Address("10.1.0.1"), bytes.fromhex("020000010001")),
             HostEntry(7, ipaddress.ip_address("fd00:a::10"),
                       ipaddress.IPv4Address("10.1.0.2"), bytes.fromhex("0200000100ff"))]
    # struct cz_host_key { __u32 vpc_id; __u32 family; __u8 addr[16]; } ->
    # struct cz_host { __be32 vtep; __u8 mac[6]; __u16 reserved; }
    assert encode_hosts(hosts) == {
        struct.pack("<II16s", 3, 4, bytes([192, 168, 1, 10])):
            bytes([10, 1, 0, 1]) + bytes.fromhex("020000010001") + b"\0\0",
        struct.pack("<II", 7, 6) + bytes.fromhex("fd00000a000000000000000000000010"):
            bytes([10, 1, 0, 2]) + bytes.fromhex("0200000100ff") + b"\0\0",
    }
    assert encode_hosts([]) == {}
    vteps = [(1001, ipaddress.IPv4Address("10.1.0.1")), (1002, ipaddress.IPv4Address("10.9.8.7"))]
    # (__u32 vni, __be32 vtep) -> __u32 VPC id
    assert encode_vteps(vteps, {1001: 0, 1002: 5}) == {
        struct.pack("<I", 1001) + bytes([10, 1, 0, 1]): struct.pack("<I", 0),
        struct.pack("<I", 1002) + bytes([10, 9, 8, 7]): struct.pack("<I", 5),
    }


def test_member_sorted_and_fast_paths_agree_with_the_slow_ones() -> None:
    import ipaddress

    import numpy as np
    import pytest

    from crosszone.intent.prefixes import PrefixError, member_sorted, parse_block
    from crosszone.intent.schema import _address

    s = np.array([3, 5, 9], np.uint64)
    keys = np.array([0, 3, 4, 9, 10], np.uint64)
    assert member_sorted(s, keys).tolist() == np.isin(keys, s).tolist()
    assert member_sorted(s[:0], keys).tolist() == [False] * 5
    for text in ("10.0.0.0/8 10.1.0.0/16", "\n 10.0.0.0/8\n"):
        assert parse_block(text).networks() == [ipaddress.ip_network(t) for t in text.split()]
    for bad, index in (("10.0.0.0/8 10.0.0.1/8", 1), ("1.2.3.4/32 300.0.0.0/8", 1),
                       ("1.2.3.4/32 ١.2.3.4/32", 1), ("1.2.3.0/24 x", 1)):
        with pytest.raises(PrefixError) as exc:
            parse_block(bad)
        assert exc.value.index == index, bad
    for text in ("1.2.3.4", "0.0.0.0", "255.255.255.255", "256.1.1.1", "01.2.3.4", "1.2.3",
                 "fd00::1", "1.2.3.4 ", "١.2.3.4"):
        try:
            want: object = ipaddress.ip_address(text)
        except ValueError:
            want = ValueError
        try:
            got: object = _address(text)
        except ValueError:
            got = ValueError
        assert got == want, text
