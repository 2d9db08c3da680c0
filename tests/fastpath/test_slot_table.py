"""The slot tables (bpf/slots.h, fastpath/slot_table.py): the writer agrees with a dict under any
sequence of puts and deletes, keeps every key reachable from its home slot, refuses what it
cannot place, and the kernel program finds keys that collided, sit past a deleted slot, or live
in the overflow slots at the end of the table."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6

from crosszone.abi import layout as L
from crosszone.abi.reasons import Reason
from crosszone.compile.encode import encode_route_arrays
from crosszone.fastpath.libbpf import BpfObject
from crosszone.fastpath.libbpf_abi import BpfError
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.sink import program
from crosszone.fastpath.slot_table import (
    DELETED,
    EMPTY,
    LIVE,
    ROUTE,
    ROUTES4,
    ROUTES6,
    VTEPS,
    SlotMap,
)
from crosszone.fastpath.testing.testrun import TestRunner

from packet_fixtures import HOST_A1, tables, vxlan


def _keys4(vpc: int, plen: int, addrs: np.ndarray) -> np.ndarray:
    k = np.zeros(len(addrs), ROUTES4.key)
    k["vpc_id"], k["plen"] = vpc, plen
    k["addr"] = addrs.astype(">u4").view("<u4")  # network byte order in memory, as in C
    return k


def _keys6(vpc: int, plen: int, hi: np.ndarray) -> np.ndarray:
    k = np.zeros(len(hi), ROUTES6.key)
    k["vpc_id"], k["plen"] = vpc, plen
    k["addr"][:, 0] = hi.astype(">u8").view("<u8")
    return k


RNG = np.random.default_rng(7)


def _random(n: int, bits: int) -> np.ndarray:
    """n distinct random integers below 2^bits (sequential keys never collide under Fibonacci
    hashing, so collisions are searched for among random ones)."""
    return np.unique(RNG.integers(0, 1 << bits, size=n, dtype=np.uint64))


def _colliding(kind, keys: np.ndarray, n: int) -> np.ndarray:
    """n keys (of these candidates) that share one home slot."""
    home = kind.home(kind.pack(keys))
    values, counts = np.unique(home, return_counts=True)
    best = values[np.argmax(counts)]
    idx = np.flatnonzero(home == best)
    assert len(idx) >= n, f"only {len(idx)} candidates share a home; widen the search"
    return keys[idx[:n]]


def _route_values(n: int, group: int = 0) -> bytes:
    v = np.zeros(n, ROUTE)
    v["action"], v["group"] = L.CZ_ACT_FORWARD, group
    return v.tobytes()


def _reachable(m: SlotMap) -> None:
    """The linear-probing invariant: no empty slot between a live key and its home."""
    s = m.slots()
    rows = np.flatnonzero(s[:, 0] & LIVE)
    homes = m.kind.home(s[rows, :-1].copy())
    assert (rows >= homes).all() and (rows - homes < L.CZ_SLOT_PROBES).all()
    for r, h in zip(rows.tolist(), homes.tolist()):
        assert (s[h:r, 0] != EMPTY).all(), f"empty slot between home {h} and key at {r}"


@pytest.fixture(scope="module")
def gateway_maps(gateway_object):
    with BpfObject.open(gateway_object) as obj:
        maps = GatewayMaps.of(obj)
        yield maps
        maps.close()


def _clear(m: SlotMap) -> None:
    s = m.slots()
    s[np.flatnonzero(s[:, 0])] = 0
    assert m.live() == 0  # and the writer's count starts again from the table


_COLLIDE4 = _colliding(ROUTES4, _keys4(7, 32, _random(1 << 22, 32)), 4)


# A small key space (8 VPCs x 3 lengths x 64 addresses) so puts, replaces and deletes of the same
# keys meet often; the colliding group below makes probe chains and tombstones certain.
_ops = st.lists(
    st.tuples(st.sampled_from(["put", "delete"]),
              st.lists(st.tuples(st.integers(0, 7), st.sampled_from([8, 24, 32]),
                                 st.integers(0, 63), st.integers(1, 3)), min_size=1, max_size=12)),
    min_size=1, max_size=8)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_writer_agrees_with_a_dict(gateway_maps, ops) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    model: dict[bytes, bytes] = {}
    collide = _COLLIDE4
    for kind, items in ops:
        keys = np.concatenate([_keys4(vpc, plen, np.array([a << (32 - plen)], np.uint64))
                               for vpc, plen, a, _ in items] + [collide[: len(items) % 5]])
        acts = [act for *_, act in items] + [1] * (len(keys) - len(items))
        vals = np.zeros(len(keys), ROUTE)
        vals["action"], vals["group"] = acts, np.arange(len(keys))
        kb = [k.tobytes() for k in keys]
        if kind == "put":
            m.update_batch(keys.tobytes(), vals.tobytes())
            model.update(zip(kb, [v.tobytes() for v in vals]))
        else:
            assert m.delete_batch(keys.tobytes()) == len({k for k in kb if k in model})
            for k in kb:
                model.pop(k, None)
        keys_out, vals_out, n = m.dump()
        got = {keys_out[i * 12:(i + 1) * 12]: vals_out[i * 8:(i + 1) * 8] for i in range(n)}
        assert got == model
        assert m.live() == len(model)
        _reachable(m)
        for k in kb:
            assert m.lookup(k) == model.get(k)
    _clear(m)


def test_replace_rewrites_only_the_value_and_delete_leaves_a_tombstone(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    keys = _colliding(ROUTES4, _keys4(1, 32, _random(1 << 22, 32)), 3)
    m.update_batch(keys.tobytes(), _route_values(3))
    s = m.slots()
    rows = np.flatnonzero(s[:, 0] & LIVE)
    assert len(rows) == 3 and rows[2] - rows[0] == 2  # one home, three consecutive slots
    first = rows[0]
    m.update(keys[1].tobytes(), _route_values(1, group=9))
    assert m.delete(keys[1].tobytes()) and not m.delete(keys[1].tobytes())
    s = m.slots()
    assert s[first + 1, 0] == DELETED
    assert np.frombuffer(s[first + 1, 1].tobytes(), ROUTE)["group"][0] == 9
    assert m.lookup(keys[2].tobytes()) is not None  # found past the tombstone
    m.update(keys[1].tobytes(), _route_values(1))   # reuses the tombstone
    s = m.slots()
    assert np.flatnonzero(s[:, 0] & LIVE).tolist() == rows.tolist()
    _clear(m)


def test_last_of_a_duplicate_key_wins(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    k = _keys4(2, 32, np.array([0x0A000001, 0x0A000001], np.uint64))
    v = np.zeros(2, ROUTE)
    v["action"], v["group"] = 1, [5, 6]
    m.update_batch(k.tobytes(), v.tobytes())
    assert m.live() == 1
    assert np.frombuffer(m.lookup(k[0].tobytes()), ROUTE)["group"][0] == 6
    _clear(m)


def test_a_key_with_no_free_slot_is_refused_and_nothing_is_written(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    _clear(m)
    key = _keys4(3, 32, np.array([0xC0A80001], np.uint64))
    home = int(ROUTES4.home(ROUTES4.pack(key))[0])
    s = m.slots()  # every slot the key could take holds some other live key
    s[home:home + L.CZ_SLOT_PROBES, 0] = LIVE | np.uint64(0xFFFF_0000_0000)
    before = s.copy()
    with pytest.raises(BpfError) as err:
        m.update(key.tobytes(), _route_values(1))
    assert err.value.errno == errno.E2BIG and "no free slot" in str(err.value)
    s = m.slots()
    assert (s == before).all()
    _clear(m)


def test_bad_input_is_refused(gateway_maps) -> None:
    m = gateway_maps.maps["routes4"]
    with pytest.raises(ValueError, match="whole number"):
        m.update(b"\0" * 11, _route_values(1))
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        m.update_batch(bytes(24), _route_values(1))


def test_a_table_of_another_shape_is_refused(gateway_maps) -> None:
    with pytest.raises(BpfError, match="expected 32"):
        SlotMap(ROUTES6, gateway_maps.maps["route4_slots"])


# --- the kernel program reads what the writer wrote ---------------------------------------


def _frame4(dst: str, src_vtep: str = HOST_A1["vtep"]) -> bytes:
    return bytes(vxlan(IP(src=HOST_A1["ip"], dst=dst) / TCP(sport=4000, dport=443),
                       src_vtep=src_vtep))


def _frame6(dst: str) -> bytes:
    return bytes(vxlan(IPv6(src=HOST_A1["ip6"], dst=dst) / TCP(sport=4000, dport=443)))


def _ip4(key) -> str:
    return ".".join(str(b) for b in key["addr"].tobytes())


def _chain(kind, keys: np.ndarray) -> np.ndarray:
    """Four candidates: two sharing a home slot h, two sharing h + 1. Put in this order they
    fill h .. h + 3, the last two displaced from home."""
    home = kind.home(kind.pack(keys))
    values, counts = np.unique(home, return_counts=True)
    two = set(values[counts >= 2].tolist())
    h = next(x for x in sorted(two) if x + 1 in two)
    first, second = np.flatnonzero(home == h)[:2], np.flatnonzero(home == h + 1)[:2]
    return keys[np.concatenate([first, second])]


def test_program_finds_colliding_routes_past_tombstones(gateway_object) -> None:
    # tenant-a (VPC 0) routes /24s; candidates: every /24 outside 10/8, 172/8 and 192/8, which
    # hold its own routes and addresses
    nets = np.arange(1 << 24, dtype=np.uint64) << np.uint64(8)
    nets = nets[~np.isin(nets >> np.uint64(24), [10, 172, 192])]
    keys = _chain(ROUTES4, _keys4(0, 24, nets))
    with TestRunner(tables(), gateway_object) as r:
        m = r.maps.maps["routes4"]
        m.update_batch(keys.tobytes(), _route_values(4))
        s = m.slots()
        rows = np.flatnonzero(s[:, 0] & LIVE)
        home = int(ROUTES4.home(ROUTES4.pack(keys[:1]))[0])
        assert [int(x) for x in rows if home <= x < home + 4] == list(range(home, home + 4))
        for k in keys:
            assert r.run(_frame4(_ip4(k)[:-1] + "9")).reason == Reason.FWD_TO_STORAGE
        m.delete_batch(keys[1:3].tobytes())
        got = [r.run(_frame4(_ip4(k)[:-1] + "9")).reason for k in keys]
        assert got == [Reason.FWD_TO_STORAGE, Reason.DROP_ROUTE_MISS, Reason.DROP_ROUTE_MISS,
                       Reason.FWD_TO_STORAGE]


def test_program_finds_ipv6_routes_and_the_overflow_slots(gateway_object) -> None:
    # tenant-a routes /48s: random candidates 2001:X:Y::/48; three that share a home, and one
    # whose home is near the table's end with every slot from there to the end taken, so it
    # lives in the overflow slots past the home range
    hi = (np.uint64(0x2001) << np.uint64(48)) | (_random(1 << 22, 32) << np.uint64(16))
    cands = _keys6(0, 48, hi)
    homes = ROUTES6.home(ROUTES6.pack(cands))
    near_end = np.flatnonzero(homes >= ROUTES6.slots - 8)
    assert len(near_end), "no candidate homes near the end of the table; widen the search"
    end_key = cands[near_end[:1]]
    end_home = int(homes[near_end[0]])
    keys = np.concatenate([_colliding(ROUTES6, cands, 3), end_key])
    with TestRunner(tables(), gateway_object) as r:
        m = r.maps.maps["routes6"]
        s = m.slots()  # other VPCs' keys fill the slots from end_home to the end
        s[end_home:ROUTES6.slots, 0] = LIVE | np.uint64(0xFFF << L.CZ_SLOT_VPC_SHIFT)
        m.update_batch(keys.tobytes(), _route_values(len(keys)))
        s = m.slots()
        assert m.lookup(end_key.tobytes()) is not None
        assert (s[ROUTES6.slots:, 0] & LIVE).any()  # the end key sits in the overflow
        for k in keys:
            hi_bytes = k["addr"][0].tobytes()
            dst = ":".join(hi_bytes[i:i + 2].hex() for i in range(0, 6, 2)) + "::9"
            assert r.run(_frame6(dst)).reason == Reason.FWD_TO_STORAGE, dst


def test_program_checks_colliding_vteps(gateway_object) -> None:
    addrs = _random(1 << 21, 23) + 0x0A800000  # in 10.128.0.0/9
    vk = np.zeros(len(addrs), VTEPS.key)
    vk["vni"] = 1001
    vk["vtep"] = addrs.astype(">u4").view("<u4")
    keys = _colliding(VTEPS, vk, 3)
    ips = [".".join(str(b) for b in k["vtep"].tobytes()) for k in keys]
    with TestRunner(tables(), gateway_object) as r:
        m = r.maps.maps["vtep_allowed"]
        m.update_batch(keys.tobytes(), np.zeros(3, "<u4").tobytes())  # -> VPC 0 (tenant-a)
        for ip in ips:
            assert r.run(_frame4("172.16.5.5", src_vtep=ip)).reason == Reason.FWD_TO_STORAGE
        m.delete(keys[1].tobytes())
        got = [r.run(_frame4("172.16.5.5", src_vtep=ip)).reason for ip in ips]
        assert got == [Reason.FWD_TO_STORAGE, Reason.DROP_VTEP_NOT_ALLOWED,
                       Reason.FWD_TO_STORAGE]


def test_a_million_routes_of_the_benchmark_sit_near_home(gateway_maps) -> None:
    """The design assumption (a quarter-full table keeps walks short) on the benchmark's route
    sets: five prefix lengths of arithmetic sequences, the shape Fibonacci hashing is weakest on
    if anything. Also the programming path the benchmark times."""
    from crosszone.bench.fastpath import route_arrays4, route_arrays6

    for arrays, name in ((route_arrays4(1_000_000), "routes4"), (route_arrays6(1_000_000),
                                                                  "routes6")):
        m = gateway_maps.maps[name]
        _clear(m)
        ops = program(gateway_maps, {name: encode_route_arrays(arrays)[1]})
        assert sum(len(op) for op in ops) == len(arrays.plen)
        d = m.probe_lengths()
        assert len(d) == len(arrays.plen)
        assert d.max() < L.CZ_SLOT_PROBES // 2 and d.mean() < 0.5, (name, d.max(), d.mean())
        _clear(m)
