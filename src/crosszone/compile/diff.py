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

An entry that changes value is a put of the whole entry, never a delete and a put. What a packet
sees of one put (docs/architecture.md, "What a packet sees during a change"): a slot-table value
is one aligned 8-byte store; a multi-word array record (config, ports, VPCs, groups, next hops)
is written into the copy no packet reads and made live by one selector store
(`fastpath.record_table`); trie and hash values are replaced whole by the kernel. Each entry is
seen old or new, never a mix; a batch, and a change of several maps, is not atomic as a whole:
a packet may meet some entries new and others still old, which the order below keeps usable.
Array maps cannot delete: entries no longer wanted there are unreachable and stay.
Operations are batches (`MapOp`: one kind, one map, many entries) so a million-route program is a
handful of batch syscalls. The entries come from `compile.encode`; `MAP_ORDER` (defined there with
the map names) is the one write order of every writer: `fastpath attach`, the agent, the test
runner and the benchmarks all program through `diff_entries` and one sink.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from crosszone.compile.encode import ARRAY_MAPS, MAP_ORDER, Entries, Records, encode_tables
from crosszone.compile.tables import Tables

__all__ = ["ARRAY_MAPS", "MAP_ORDER", "DictSink", "Entries", "MapOp", "Sink", "apply_to",
           "count", "diff", "diff_entries", "diff_map"]


@dataclass(frozen=True)
class MapOp:
    """One batch: put (insert or replace) or delete these keys in one map."""

    kind: Literal["put", "delete"]
    map: str
    keys: Sequence[bytes]  # a list, or an encode.RecordList (one buffer) for a bulk table
    values: Sequence[bytes] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


class Sink(Protocol):
    """Whatever performs the operations (the BPF maps: fastpath.sink.MapSink; a dict in tests)."""

    def apply(self, op: MapOp) -> None:
        """Perform one batch."""


def diff_map(name: str, old: Mapping[bytes, bytes], new: Mapping[bytes, bytes]
             ) -> tuple[MapOp | None, MapOp | None]:
    """(put, delete) batches that turn one map's old entries into new (None when empty)."""
    if not old:
        if not new:
            return None, None
        if isinstance(new, Records):  # a bulk table into an empty map: its buffers as they are
            return MapOp("put", name, *new.record_lists()), None
        return MapOp("put", name, list(new), list(new.values())), None
    if isinstance(old, Records):
        old = old.dict
    if isinstance(new, Records):
        new = new.dict
    if old is new or old == new:  # one C-level compare, not a Python loop over a million keys
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
