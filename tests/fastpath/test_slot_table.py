"""The slot tables (bpf/slots.h, fastpath/slot_table.py): the writer agrees with a dict under any
sequence of puts and deletes, keeps every key reachable from its home slot, refuses what it
cannot place, and the kernel program finds keys that collided, sit past a deleted slot, or live
in the overflow slots at the end of the table."""

from __future__ import annotations

import numpy as np
import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.inet6 import IPv6

from crosszone.abi import layout as L
from crosszone.abi.reasons import Reason
from crosszone.compile.encode import encode_route_arrays
from crosszone.fastpath.libbpf import BpfObject
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.sink import program
from crosszone.fastpath.slot_table import (
    LIVE,
    ROUTES4,
    ROUTES6,
    VTEPS,
)
from crosszone.fastpath.testing.testrun import TestRunner

from packet_fixtures import HOST_A1, tables, vxlan
from slot_table_cases import (  # noqa: F401  (collected by pytest as this module's tests)
    _clear,
    _colliding,
    _keys4,
    _keys6,
    _random,
    _reachable,
    _route_values,
    test_a_deleted_slot_is_reused_only_after_a_grace_period,
    test_a_key_with_no_free_slot_is_refused_and_nothing_is_written,
    test_a_table_of_another_shape_is_refused,
    test_bad_input_is_refused,
    test_last_of_a_duplicate_key_wins,
    test_replace_rewrites_only_the_value_and_delete_leaves_a_tombstone,
    writer_agrees_with_a_dict,
)


@pytest.fixture(scope="module")
def gateway_maps(gateway_object):
    with BpfObject.open(gateway_object) as obj:
        maps = GatewayMaps.of(obj)
        yield maps
        maps.close()


test_writer_agrees_with_a_dict = writer_agrees_with_a_dict(30)


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
    from crosszone_lab.bench.fastpath import route_arrays4, route_arrays6

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
