"""Diff two gateway states into the minimal, make-before-break ordered list of map operations.

A state is `Entries`: map name -> {key bytes: value bytes}, exactly what the BPF maps hold.
Diffing encoded entries (not `Tables` objects) makes one function serve both a change between two
intents and a restarted agent that compares what it wants with what the pinned maps hold.

Order (no live route is ever missing, no route ever points at something that is not there yet):

1. puts, dependencies first: ports, devmap slots, next hops, ECMP groups, hosts, the route Bloom
   bits (only added), routes, storage-facing prefixes, then the VPC entry (which enables the
   prefix lengths its routes use), VNI -> VPC, the allowed VTEPs (which admit traffic into a
   complete VPC) and the config;
2. deletes, in the reverse order: VTEPs and the VPC go before its routes, routes before the
   groups; last, Bloom words lose the bits of routes that are gone.

An entry that changes value is a put in place (an atomic map update), never a delete and a put.
Array maps cannot delete: entries no longer wanted there are unreachable and stay.
Operations are batches (`MapOp`: one kind, one map, many entries) so a million-route program is a
handful of batch syscalls.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np

from crosszone.compile.tables import Tables
from crosszone.fastpath import bloom
from crosszone.fastpath import maps_io as mio

Entries = dict[str, dict[bytes, bytes]]

#: Maps in dependency order: each may point at entries of the maps before it.
MAP_ORDER: tuple[str, ...] = (
    "ports", "tx_ports", "nexthops", "ecmp_groups", "hosts", "route_bloom",
    "routes4", "routes6", "sf4", "sf6", "vpcs", "vpc_by_vni", "vtep_allowed", "config",
)
#: Array maps: every index exists, so nothing is deleted there.
ARRAY_MAPS = frozenset({"ports", "tx_ports", "nexthops", "ecmp_groups", "config",
                        "route_bloom", "vpcs"})
#: The route Bloom filter: a clear bit hides a route, so bits are only ever added while routes
#: may exist; bits of removed routes are cleared after the deletes (a stale bit costs a probe).
BLOOM = "route_bloom"


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
    return [buf[i:i + size] for i in range(0, len(buf), size)]


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
        e["nexthops"][u32(n.nh_id)] = mio.encode_nexthop(n)
    for g in t.groups:
        e["ecmp_groups"][u32(g.group_id)] = mio.encode_group(g)
    e["hosts"] = dict(mio.encode_host(h) for h in t.hosts)
    vpc_of = {v.vni: v.vpc_id for v in t.vpcs}
    e["vtep_allowed"] = {mio.encode_vtep(vni, ip): u32(vpc_of[vni]) for vni, ip in t.vteps}
    arrays = [mio.RouteArrays.of(sel) for fam in (4, 6)
              if (sel := [r for r in t.routes if r.prefix.version == fam])]
    arrays += list(extra_routes)
    hashes = []
    for arr in arrays:
        name, entries = encode_route_arrays(arr)
        e[name].update(entries)
        hashes.append(arr.bloom_hashes())
    if hashes:
        e[BLOOM] = bloom_entries(np.concatenate(hashes))
    for sf in t.storage_facing:
        k, v = mio.encode_sf(sf)
        e["sf4" if sf.prefix.version == 4 else "sf6"][k] = v
    for v in t.vpcs:
        e["vpcs"][u32(v.vpc_id)] = mio.encode_vpc(v)
        e["vpc_by_vni"][u32(v.vni)] = u32(v.vpc_id)
    e["config"][u32(0)] = mio.encode_config(t)
    return e


def bloom_entries(hashes: np.ndarray) -> dict[bytes, bytes]:
    """Bloom filter words (index -> 64 bits) with the bits of these route hashes."""
    idx, bits = bloom.words(hashes)
    return dict(zip(split(idx.astype("<u4").tobytes(), 4), split(bits.astype("<u8").tobytes(), 8)))


def _or(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(8, "little")


def diff_bloom(old: dict[bytes, bytes], new: dict[bytes, bytes]
               ) -> tuple[MapOp | None, MapOp | None]:
    """(bits to add first, words to narrow last) for the route Bloom filter."""
    zero = bytes(8)
    add_k, add_v, cut_k, cut_v = [], [], [], []
    for k, v in new.items():
        cur = old.get(k, zero)
        both = _or(cur, v)
        if both != cur:
            add_k.append(k)
            add_v.append(both)
        if both != v:
            cut_k.append(k)
            cut_v.append(v)
    return (MapOp("put", BLOOM, add_k, add_v) if add_k else None,
            MapOp("put", BLOOM, cut_k, cut_v) if cut_k else None)


def diff_map(name: str, old: dict[bytes, bytes], new: dict[bytes, bytes]
             ) -> tuple[MapOp | None, MapOp | None]:
    """(put, delete) batches that turn one map's old entries into new (None when empty)."""
    if old is new:
        return None, None
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
        if name == BLOOM:
            put, narrow = diff_bloom(old.get(name, {}), new.get(name, {}))
            if put:
                puts.append(put)
            if narrow:
                dels.insert(0, narrow)  # after every delete (dels is reversed below)
            continue
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
