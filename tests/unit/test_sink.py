"""The one programming path (compile -> encode -> diff -> fastpath.sink) on fake maps: a full
program reads back as compiled, a change applied batch by batch never leaves a live route
missing, and the binding step can point the devmap elsewhere (test runs point it at lo)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosszone.abi.objects import BUILD_DIR as BUILD
from crosszone.compile.diff import ARRAY_MAPS, MapOp, diff_entries
from crosszone.compile.encode import bind_ports, encode_tables, u32
from crosszone.compile.gateway import compile_gateway
from crosszone.compile.tables import compile_tables
from crosszone.fastpath.sink import MapSink, program
from crosszone.fastpath.testing.fake_maps import fake_gateway
from crosszone.intent.cluster import load_cluster
from unit.test_diff import changed_clusters

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
IFX = (lambda name: 5)  # noqa: E731
OBJ = BUILD / "xdp_gateway.o"
OBJ_LPM = BUILD / "xdp_gateway_lpm.o"

pytestmark = pytest.mark.skipif(not OBJ.exists(), reason="build/ objects missing: make build")


def held(sink: MapSink, wanted: dict) -> dict:
    """What the maps hold, compared as the sink reads them (array maps on the wanted slots)."""
    return sink.read(wanted)


def same(have: dict, want: dict) -> bool:
    for name, w in want.items():
        h = have.get(name, {})
        if name in ARRAY_MAPS:
            if {k: h.get(k) for k in w} != w:
                return False
        elif h != dict(w):
            return False
    return True


@pytest.mark.parametrize("obj", [OBJ, OBJ_LPM], ids=["slot_tables", "lpm_trie"])
def test_full_program_reads_back_as_compiled(obj: Path) -> None:
    maps = fake_gateway(obj)
    d = compile_gateway(load_cluster(CLUSTER), "gw-a", IFX)
    ops = program(maps, d.entries)
    assert [op.kind for op in ops] == ["put"] * len(ops)
    sink = MapSink(maps)
    assert same(held(sink, d.entries), d.entries)
    # the maps hold exactly that: a second program from what they hold writes nothing
    assert diff_entries(held(sink, d.entries), d.entries) == []
    maps.close()


def test_attach_binding_points_the_devmap_where_asked() -> None:
    maps = fake_gateway(OBJ)
    t = bind_ports(compile_tables(load_cluster(CLUSTER), "gw-a"), lambda n: 1000)
    program(maps, encode_tables(t, devmap_ifindex=lambda p: 1))
    for p in t.ports:
        assert maps.maps["tx_ports"].lookup(u32(p.index)) == u32(1)
        assert maps.maps["ports"].lookup(u32(p.index))[:4] == u32(1000)


class CheckingSink(MapSink):
    """A sink that reads the fake maps back after every batch and checks the invariants."""

    def __init__(self, maps, old: dict, new: dict) -> None:  # type: ignore[no-untyped-def]
        super().__init__(maps)
        self.old, self.new, self.steps = old, new, 0
        self.wanted = {k: {**old.get(k, {}), **new.get(k, {})} for k in set(old) | set(new)}

    def apply(self, op: MapOp) -> None:
        super().apply(op)
        self.steps += 1
        step = self.read(self.wanted)
        for fam in ("routes4", "routes6"):
            for k in self.old.get(fam, {}).keys() & self.new.get(fam, {}).keys():
                assert k in step[fam], f"live route {k.hex()} missing after {op.map} {op.kind}"
            for v in step[fam].values():
                if int.from_bytes(v[0:4], "little") == 1:  # forward: its group is there
                    assert v[4:8] in step["ecmp_groups"], f"route to a missing group ({op})"


@pytest.mark.parametrize("seed", range(3))
def test_a_change_applied_batch_by_batch_never_loses_a_live_route(seed: int) -> None:
    old_c, new_c = changed_clusters(seed)
    a = compile_gateway(old_c, "gw-a", IFX)
    b = compile_gateway(new_c, "gw-a", IFX, a.ids)
    maps = fake_gateway(OBJ)
    program(maps, a.entries)
    sink = CheckingSink(maps, a.entries, b.entries)
    ops = program(sink, b.entries, old=a.entries)
    assert sink.steps == len(ops) > 0
    have = sink.read(b.entries)
    assert same(have, b.entries)
    for name in ("routes4", "routes6", "hosts", "vtep_allowed"):
        assert have[name] == b.entries[name], name  # and nothing stale is left
    maps.close()


# -- double-buffered records (issue 12, finding 14) -------------------------------------------


class _Watched:
    """A fake copies array that records, for every write, the index and the selector then."""

    def __init__(self, inner, sel) -> None:
        self.inner, self.sel, self.writes = inner, sel, []
        for attr in ("name", "value_size", "value_stride", "max_entries", "lookup", "dump"):
            setattr(self, attr, getattr(inner, attr))

    def update_batch(self, keys: bytes, values: bytes) -> int:
        for i in range(0, len(keys), 4):
            idx = int.from_bytes(keys[i:i + 4], "little")
            live = int.from_bytes(self.sel.lookup(u32(idx // 2)), "little")
            self.writes.append((idx, live))
        return self.inner.update_batch(keys, values)


def _records(sync=lambda: None):
    from crosszone.fastpath.grace import Grace
    from crosszone.fastpath.record_table import RecordMap
    from crosszone.fastpath.testing.fake_maps import fake_maps

    maps = fake_maps(OBJ)
    grace = Grace(sync=sync, background=False)
    copies = _Watched(maps["vpcs"], maps["vpcs_sel"])
    return RecordMap("vpcs", copies, maps["vpcs_sel"], grace), copies, grace


def test_a_record_put_never_writes_the_live_copy_and_flips_the_selector_after() -> None:
    rec, copies, _ = _records()
    size = rec.value_size
    for n in range(6):
        rec.update(u32(7), bytes([n]) * size)
        assert rec.lookup(u32(7)) == bytes([n]) * size
    # copies of record 7 are indexes 14 and 15; each write went to the one not live then
    assert [i for i, _ in copies.writes] == [15, 14, 15, 14, 15, 14]
    assert all(i - 14 != live for i, live in copies.writes)
    # the copy no longer live still holds the previous value (packets may be reading it)
    assert copies.inner.lookup(u32(15)) == bytes([4]) * size


def test_a_copy_that_was_live_is_rewritten_only_after_a_grace_period() -> None:
    states = []
    rec, _, grace = _records()
    grace._sync = lambda: states.append(rec.lookup(u32(3)))
    size = rec.value_size
    rec.update(u32(3), b"a" * size)      # generation 0 (a previous writer) is owed first
    assert grace.periods == 1
    rec.update(u32(9), b"x" * size)      # another record: no wait for record 3's flip
    assert grace.periods == 1
    rec.update(u32(3), b"b" * size)      # copy 0 of record 3 was live until the last flip
    assert grace.periods == 2 and grace.waits == 2
    assert states[-1] == b"a" * size     # the period ran before copy 0 was touched
    rec.update_batch(u32(3) + u32(3), b"c" * size + b"d" * size)   # the last one wins
    assert rec.lookup(u32(3)) == b"d" * size


def test_records_read_back_through_the_sink_as_their_live_copies() -> None:
    from crosszone.fastpath.grace import Grace
    from crosszone.fastpath.libbpf_abi import BpfError
    from crosszone.fastpath.maps_io import GatewayMaps
    from crosszone.fastpath.testing.fake_maps import fake_maps

    gm = GatewayMaps(fake_maps(OBJ), grace=Grace(sync=lambda: None, background=False))
    t = bind_ports(compile_tables(load_cluster(CLUSTER), "gw-a"), IFX)
    want = encode_tables(t)
    sink = MapSink(gm)
    program(sink, want)
    program(sink, want)  # nothing changes: nothing written, the same copies stay live
    assert same(held(sink, want), want)
    for name in ("config", "ports", "vpcs", "ecmp_groups", "nexthops"):
        assert type(gm.maps[name]).__name__ == "RecordMap", name
        keys, _, n = gm.maps[name].dump()
        assert n == gm.maps[name].max_entries == len(keys) // 4
    vpcs = gm.maps["vpcs"]
    with pytest.raises(BpfError, match="past"):
        vpcs.update(u32(vpcs.max_entries), bytes(vpcs.value_size))
    with pytest.raises(BpfError, match="array"):
        gm.maps["vpcs"].delete(u32(0))


def test_the_map_writers_refuse_a_cpu_that_may_reorder_stores(monkeypatch) -> None:
    import platform

    from crosszone.fastpath.libbpf_abi import BpfError
    from crosszone.fastpath.testing.fake_maps import fake_maps

    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    from crosszone.fastpath.maps_io import GatewayMaps

    with pytest.raises(BpfError, match="x86-64 store order"):
        GatewayMaps(fake_maps(OBJ))
