"""Diff two gateway states into the minimal, make-before-break ordered list of map operations.

A state is `Entries`: map name -> {key bytes: value bytes}, exactly what the BPF maps hold.
Diffing encoded entries (not `Tables` objects) makes one function serve both a change between two
intents and a restarted agent that compares what it wants with what the pinned maps hold.

Order (no live route is ever missing, no route ever points at something that is not there yet):

1. puts, dependencies first: ports, devmap slots, next hops, ECMP groups, hosts, routes,
   storage-facing prefixes, then the VPC entry (which enables the prefix lengths its routes use),
   VNI -> VPC, the allowed VTEPs (which admit traffic into a complete VPC) and the config;
2. deletes, in the reverse order: VTEPs and the VPC go before its routes, routes before the
   groups.

An entry that changes value is a put in place (one 8-byte store in a slot table, an atomic update
elsewhere), never a delete and a put.
Array maps cannot delete: entries no longer wanted there are unreachable and stay.
Operations are batches (`MapOp`: one kind, one map, many entries) so a million-route program is a
handful of batch syscalls.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from crosszone.abi import layout as L
from crosszone.compile.tables import HostEntry, Tables
from crosszone.fastpath import maps_io as mio
from crosszone.intent.hosts import HostSet

Entries = dict[str, dict[bytes, bytes]]

#: Maps in dependency order: each may point at entries of the maps before it.
MAP_ORDER: tuple[str, ...] = (
    "ports", "tx_ports", "nexthops", "ecmp_groups", "hosts", "routes4", "routes6",
    "sf4", "sf6", "vpcs", "vpc_by_vni", "vtep_allowed", "config",
)
#: Array maps: every index exists, so nothing is deleted there.
ARRAY_MAPS = frozenset({"ports", "tx_ports", "nexthops", "ecmp_groups", "config", "vpcs"})


@dataclass(frozen=True)
class MapOp:
    """One batch: put (insert or replace) or delete these keys in one map."""

    kind: Literal["put", "delete"]
    map: str
    keys: list[bytes]
    values: list[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


class Sink(Protocol):
    """Whatever performs the operations (the BPF maps; a dict in tests)."""

    def apply(self, op: MapOp) -> None:
        """Perform one batch."""


def split(buf: bytes, size: int) -> list[bytes]:
    """A contiguous buffer of fixed-size records -> the records."""
    if not buf:
        return []
    return np.frombuffer(buf, f"V{size}").tolist()  # type: ignore[no-any-return]  # C loop


def encode_route_arrays(arr: mio.RouteArrays) -> tuple[str, dict[bytes, bytes]]:
    """(map name, entries) of a family's routes given as arrays."""
    keys, values = arr.encode(lpm=False)
    n = len(arr.vpc_id)
    if n == 0:
        return ("routes4" if arr.family == 4 else "routes6"), {}
    return ("routes4" if arr.family == 4 else "routes6"), dict(
        zip(split(keys, len(keys) // n), split(values, len(values) // n)))


def encode_tables(t: Tables, extra_routes: Iterable[mio.RouteArrays] = ()) -> Entries:
    """Every map entry of a gateway programmed with t (plus routes given as arrays)."""
    e: Entries = {name: {} for name in MAP_ORDER}
    u32 = mio._u32
    for p in t.ports:
        e["ports"][u32(p.index)] = mio.encode_port(p)
        if p.ifindex:
            e["tx_ports"][u32(p.index)] = u32(p.ifindex)
    for n in t.nexthops:
        e["nexthops"][u32(n.nh_id)] = mio.encode_nexthop(n, t.port_at(n.port))
    for g in t.groups:
        e["ecmp_groups"][u32(g.group_id)] = mio.encode_group(g)
    e["hosts"] = encode_hosts(t.hosts)
    vpc_of = {v.vni: v.vpc_id for v in t.vpcs}
    e["vtep_allowed"] = encode_vteps(t.vteps, vpc_of)
    arrays = [mio.RouteArrays.of(sel) for fam in (4, 6)
              if (sel := [r for r in t.routes if r.prefix.version == fam])]
    arrays += list(extra_routes)
    for arr in arrays:
        name, entries = encode_route_arrays(arr)
        e[name].update(entries)
    for sf in t.storage_facing:
        k, v = mio.encode_sf(sf)
        e["sf4" if sf.prefix.version == 4 else "sf6"][k] = v
    for vpc in t.vpcs:
        e["vpcs"][u32(vpc.vpc_id)] = mio.encode_vpc(vpc)
        e["vpc_by_vni"][u32(vpc.vni)] = u32(vpc.vpc_id)
    e["config"][u32(0)] = mio.encode_config(t)
    return e


_HOST_KEY = np.dtype(L.CzHostKey)
_HOST = np.dtype(L.CzHost)


def encode_hosts(hosts: Sequence[HostEntry]) -> dict[bytes, bytes]:
    """Host entries, encoded with numpy (struct cz_host_key -> struct cz_host, as
    `maps_io.encode_host` does one at a time: 100k hosts in ~0.2 s instead of ~2 s)."""
    n = len(hosts)
    if n == 0:
        return {}
    k = np.zeros(n, _HOST_KEY)
    v = np.zeros(n, _HOST)
    k["vpc_id"] = np.fromiter((h.vpc_id for h in hosts), np.uint32, n)
    k["family"] = np.fromiter((h.addr.version for h in hosts), np.uint32, n)
    k["addr"] = np.frombuffer(b"".join([h.addr.packed.ljust(16, b"\0") for h in hosts]),
                              np.uint8).reshape(n, 16)
    v["vtep"] = np.frombuffer(b"".join([h.vtep.packed for h in hosts]), np.uint8).reshape(n, 4)
    v["mac"] = np.frombuffer(b"".join([h.mac for h in hosts]), np.uint8).reshape(n, 6)
    return dict(zip(split(k.tobytes(), _HOST_KEY.itemsize), split(v.tobytes(), _HOST.itemsize)))


def encode_host_set(hs: HostSet, vpc_id: np.ndarray, vni: np.ndarray
                    ) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """(hosts entries, vtep_allowed entries) of compact hosts, straight from their arrays.

    vpc_id and vni give, per host, its VPC's id and VNI (the caller maps the VPC names)."""
    n4, n6 = len(hs.a4), len(hs.hi6)
    if n4 + n6 == 0:
        return {}, {}
    k = np.zeros(n4 + n6, _HOST_KEY)
    v = np.zeros(n4 + n6, _HOST)
    owner = np.concatenate([hs.h4, hs.h6])
    k["vpc_id"] = vpc_id[owner]
    k["family"][:n4] = 4
    k["family"][n4:] = 6
    k["addr"][:n4, :4] = hs.a4.astype(">u4").view(np.uint8).reshape(n4, 4)
    k["addr"][n4:, :8] = hs.hi6.astype(">u8").view(np.uint8).reshape(n6, 8)
    k["addr"][n4:, 8:] = hs.lo6.astype(">u8").view(np.uint8).reshape(n6, 8)
    v["vtep"] = hs.vtep[owner].astype(">u4").view(np.uint8).reshape(-1, 4)
    v["mac"] = hs.mac[owner].astype(">u8").view(np.uint8).reshape(-1, 8)[:, 2:]
    hosts = dict(zip(split(k.tobytes(), _HOST_KEY.itemsize), split(v.tobytes(), _HOST.itemsize)))
    pairs = np.unique((vni.astype(np.uint64) << np.uint64(32)) | hs.vtep.astype(np.uint64))
    vk = np.zeros(len(pairs), _VTEP_KEY)
    vk["vni"] = (pairs >> np.uint64(32)).astype(np.uint32)
    vk["vtep"] = (pairs & np.uint64(0xFFFFFFFF)).astype(">u4").view(np.uint8).reshape(-1, 4)
    # the value is the VPC id of the pair's VNI
    vni_to_id = dict(zip(vni.tolist(), vpc_id.tolist()))
    ids = np.array([vni_to_id[int(x)] for x in (pairs >> np.uint64(32)).tolist()], "<u4")
    vteps = dict(zip(split(vk.tobytes(), _VTEP_KEY.itemsize), split(ids.tobytes(), 4)))
    return hosts, vteps


_VTEP_KEY = np.dtype(L.CzVtepKey)


def encode_vteps(vteps: Iterable[tuple[int, ipaddress.IPv4Address]], vpc_of: dict[int, int]
                 ) -> dict[bytes, bytes]:
    """Allowed (VNI, VTEP) -> VPC id entries, encoded with numpy (`maps_io.encode_vtep`)."""
    pairs = list(vteps)
    n = len(pairs)
    if n == 0:
        return {}
    k = np.zeros(n, _VTEP_KEY)
    k["vni"] = np.fromiter((vni for vni, _ in pairs), np.uint32, n)
    k["vtep"] = np.frombuffer(b"".join([ip.packed for _, ip in pairs]), np.uint8).reshape(n, 4)
    ids = np.fromiter((vpc_of[vni] for vni, _ in pairs), "<u4", n)
    return dict(zip(split(k.tobytes(), _VTEP_KEY.itemsize), split(ids.tobytes(), 4)))


def diff_map(name: str, old: dict[bytes, bytes], new: dict[bytes, bytes]
             ) -> tuple[MapOp | None, MapOp | None]:
    """(put, delete) batches that turn one map's old entries into new (None when empty)."""
    if old is new or old == new:  # one C-level compare, not a Python loop over a million keys
        return None, None
    if not old:
        return (MapOp("put", name, list(new), list(new.values())) if new else None), None
    put_k: list[bytes] = []
    put_v: list[bytes] = []
    get = old.get
    for k, v in new.items():
        if get(k) != v:
            put_k.append(k)
            put_v.append(v)
    dels = [] if name in ARRAY_MAPS else [k for k in old if k not in new]
    return (MapOp("put", name, put_k, put_v) if put_k else None,
            MapOp("delete", name, dels) if dels else None)


def diff_entries(old: Entries, new: Entries, maps: Sequence[str] = MAP_ORDER) -> list[MapOp]:
    """The minimal batches from old to new, ordered make-before-break (see the module doc)."""
    puts: list[MapOp] = []
    dels: list[MapOp] = []
    for name in maps:
        put, delete = diff_map(name, old.get(name, {}), new.get(name, {}))
        if put:
            puts.append(put)
        if delete:
            dels.append(delete)
    return puts + dels[::-1]


def diff(old: Tables | None, new: Tables) -> list[MapOp]:
    """Operations from the gateway state of old (None = empty gateway) to new."""
    return diff_entries(encode_tables(old) if old is not None else {}, encode_tables(new))


def apply_to(entries: Entries, ops: Iterable[MapOp]) -> Iterator[Entries]:
    """Apply ops to entries in place, yielding after each batch (tests check every step)."""
    for op in ops:
        m = entries.setdefault(op.map, {})
        if op.kind == "put":
            m.update(zip(op.keys, op.values))
        else:
            for k in op.keys:
                m.pop(k, None)
        yield entries


def count(ops: Iterable[MapOp]) -> dict[str, int]:
    """Entries per operation kind: {'put': n, 'delete': m}."""
    out = {"put": 0, "delete": 0}
    for op in ops:
        out[op.kind] += len(op)
    return out


class DictSink:
    """A sink that applies operations to plain dicts (tests, dry runs)."""

    def __init__(self, entries: Entries | None = None) -> None:
        self.entries: Entries = entries if entries is not None else {}
        self.log: list[MapOp] = []

    def apply(self, op: MapOp) -> None:
        """Record and apply one batch."""
        self.log.append(op)
        for _ in apply_to(self.entries, [op]):
            pass
