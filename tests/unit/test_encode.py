"""The one encoder (compile/encode.py) against C layouts built by hand with struct: route keys
of both tables, the LPM trie's keys, values, compact hosts, and the dtypes derived from the
ctypes mirrors."""

from __future__ import annotations

import ctypes
import ipaddress
import struct

import numpy as np

from crosszone.abi import layout as L
from crosszone.compile import encode as enc
from crosszone.compile.tables import Route
from crosszone.intent.hosts import parse_hosts


def _route(vpc: int, prefix: str, action: int = 1, group: int = 2) -> Route:
    return Route(vpc, ipaddress.ip_network(prefix), action, group)


def test_route_keys_and_values_match_hand_built_bytes() -> None:
    arr = enc.RouteArrays.of([_route(3, "10.1.2.0/24"), _route(4, "192.168.0.0/16", 2, 0)])
    name, entries = enc.encode_route_arrays(arr)
    # (__u32 vpc_id, __u32 plen, masked address in network order) -> struct cz_route
    assert name == "routes4" and dict(entries) == {
        struct.pack("<II", 3, 24) + bytes([10, 1, 2, 0]): struct.pack("<II", 1, 2),
        struct.pack("<II", 4, 16) + bytes([192, 168, 0, 0]): struct.pack("<II", 2, 0),
    }
    # struct cz_lpm4_key { __u32 prefixlen; __be32 vpc_id; __be32 addr; }
    keys, _ = arr.encode(lpm=True)
    assert keys == (struct.pack("<I", 56) + struct.pack(">I", 3) + bytes([10, 1, 2, 0])
                    + struct.pack("<I", 48) + struct.pack(">I", 4) + bytes([192, 168, 0, 0]))
    assert enc.route_keys_to_lpm(b"".join(entries), 4) == keys
    assert enc.lpm_keys_to_route(keys, 4) == b"".join(entries)


def test_ipv6_route_keys_match_hand_built_bytes() -> None:
    arr = enc.RouteArrays.of([_route(7, "2001:db8:1::/48"), _route(0, "fd00::1/128")])
    name, entries = enc.encode_route_arrays(arr)
    a1 = ipaddress.ip_address("2001:db8:1::").packed
    a2 = ipaddress.ip_address("fd00::1").packed
    assert name == "routes6" and list(entries) == [struct.pack("<II", 7, 48) + a1,
                                                   struct.pack("<II", 0, 128) + a2]
    # struct cz_lpm6_key { __u32 prefixlen; __be32 vpc_id; __u8 addr[16]; }
    lpm, _ = arr.encode(lpm=True)
    assert lpm == (struct.pack("<I", 80) + struct.pack(">I", 7) + a1
                   + struct.pack("<I", 160) + struct.pack(">I", 0) + a2)
    assert enc.lpm_keys_to_route(enc.route_keys_to_lpm(b"".join(entries), 6), 6) == b"".join(
        entries)


def test_dtypes_are_derived_from_the_mirrors() -> None:
    for dt, mirror in ((enc.ROUTE4_KEY, L.CzRoute4Key), (enc.ROUTE6_KEY, L.CzRoute6Key),
                       (enc.LPM4_KEY, L.CzLpm4Key), (enc.LPM6_KEY, L.CzLpm6Key),
                       (enc.VTEP_KEY, L.CzVtepKey), (enc.HOST_KEY, L.CzHostKey),
                       (enc.HOST, L.CzHost), (enc.ROUTE, L.CzRoute)):
        assert dt.itemsize == ctypes.sizeof(mirror), mirror
        assert list(dt.names or ()) == [f for f, _ in mirror._fields_]
        for f, _ in mirror._fields_:
            assert dt.fields[f][1] == getattr(mirror, f).offset, (mirror, f)  # type: ignore[index]


def test_compact_hosts_match_hand_built_bytes() -> None:
    hs = parse_hosts("h1 tenant-a 10.1.0.1 02:00:00:01:00:01 192.168.1.10\n"
                     "h2 tenant-b 10.1.0.2 02:00:00:01:00:ff fd00:a::10\n")
    # per host: its VPC's id and VNI
    hosts, vteps = enc.encode_host_set(hs, np.array([3, 7]), np.array([1001, 1002]))
    assert hosts == {
        struct.pack("<II16s", 3, 4, bytes([192, 168, 1, 10])):
            bytes([10, 1, 0, 1]) + bytes.fromhex("020000010001") + b"\0\0",
        struct.pack("<II", 7, 6) + ipaddress.ip_address("fd00:a::10").packed:
            bytes([10, 1, 0, 2]) + bytes.fromhex("0200000100ff") + b"\0\0",
    }
    assert vteps == {
        struct.pack("<I", 1001) + bytes([10, 1, 0, 1]): struct.pack("<I", 3),
        struct.pack("<I", 1002) + bytes([10, 1, 0, 2]): struct.pack("<I", 7),
    }


def test_bulk_records_stay_buffers_until_looked_up() -> None:
    arr = enc.RouteArrays.of([_route(1, f"10.0.{i}.0/24") for i in range(5)])
    _, rec = enc.encode_route_arrays(arr)
    assert isinstance(rec, enc.Records) and len(rec) == 5 and rec._dict is None
    keys, values = rec.record_lists()
    assert len(keys) == 5 and keys[1] == struct.pack("<II", 1, 24) + bytes([10, 0, 1, 0])
    assert keys[-1] == list(keys)[4] and values.buffer == arr.values().tobytes()
    assert rec == dict(zip(keys, values)) and rec[keys[2]] == struct.pack("<II", 1, 2)


def test_a_new_integer_field_is_encoded_by_name_alone() -> None:
    """An integer field added to a table entry and to its struct mirror needs no encoder edit."""
    import dataclasses

    from crosszone.compile.encode import same_named

    class VpcWithWeight(L.CzVpc):
        _fields_ = (("weight", ctypes.c_uint32),)

    @dataclasses.dataclass
    class Entry:
        vpc_id: int
        flags: int
        weight: int
        prefix4: object = None  # not an integer: left to the explicit encoder

    s = same_named(VpcWithWeight(), Entry(vpc_id=7, flags=3, weight=250))
    assert (s.vpc_id, s.flags, s.weight) == (7, 3, 250)
    assert bytes(s.prefix4) == bytes(4)
    # an attribute the struct does not have is ignored, one the entry lacks stays zero
    t = same_named(L.CzConfig(), Entry(vpc_id=1, flags=5, weight=9))
    assert (t.flags, t.compute_port) == (5, 0)


def test_records_change_like_a_dict_and_hand_on_what_they_hold() -> None:
    """A bulk Records: reads, writes and deletes behave as on a dict, and the buffers handed to
    a batch write follow the changes (not the encoding they started from)."""
    import numpy as np

    k = np.arange(4, dtype="<u4")
    v = np.arange(10, 14, dtype="<u4")
    r = enc.Records(k, v)
    assert len(r) == 4 and r[enc.u32(2)] == enc.u32(12) and enc.u32(9) not in r
    keys, values = r.record_lists()
    assert list(keys) == [enc.u32(i) for i in range(4)]
    r.update({enc.u32(9): enc.u32(19)})
    r[enc.u32(0)] = enc.u32(20)
    del r[enc.u32(1)]
    assert r.pop(enc.u32(3)) == enc.u32(13)
    assert dict(r) == {enc.u32(0): enc.u32(20), enc.u32(2): enc.u32(12), enc.u32(9): enc.u32(19)}
    keys, values = r.record_lists()
    assert dict(zip(keys, values)) == dict(r) and len(keys) == 3
    both = enc.Records.join([enc.Records(k[:2], v[:2]), enc.Records(k[2:], v[2:])])
    assert dict(both) == dict(enc.Records(k, v))
