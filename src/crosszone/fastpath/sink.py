"""The one sink: applies map operations to a gateway's BPF maps, and reads them back.

Every writer of the maps programs through here, in one order: compile -> `compile.encode` ->
`compile.diff.diff_entries(old, new)` -> `MapSink.apply` (`program` does the last two steps).
`fastpath attach`, the agent, the test runner and the benchmarks all use it: the diff plans,
`MapSink` performs. Batches go through bpf_map_update_batch/delete_batch (libbpf falls back to
one call per entry for map types without batch support, e.g. the devmap).

The devmap (`tx_ports`) is written from inside the gateway's network namespace: the kernel
resolves a devmap value's ifindex in the namespace of the process that writes it, so a write
from the root namespace would point the slot at whatever device has that index there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from crosszone.compile.diff import ARRAY_MAPS, MAP_ORDER, Entries, MapOp, diff_entries
from crosszone.compile.encode import RecordList, split
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.linux.netns import in_netns

#: Maps whose values are ifindexes the kernel resolves in the writer's namespace.
DEVMAPS = frozenset({"tx_ports"})


class MapSink:
    """Apply MapOps to the maps of one gateway."""

    def __init__(self, maps: GatewayMaps, netns: str | None = None) -> None:
        self.maps = maps
        self.netns = netns
        self.entries_written = 0

    def apply(self, op: MapOp) -> None:
        """Perform one batch."""
        if op.map in DEVMAPS and self.netns is not None:
            with in_netns(self.netns):
                self._apply(op)
        else:
            self._apply(op)

    def _apply(self, op: MapOp) -> None:
        m = self.maps.maps[op.map]
        if op.kind == "put":
            if len(op) == 1:
                m.update(op.keys[0], op.values[0])
            else:
                m.update_batch(_joined(op.keys), _joined(op.values))
        elif len(op) == 1:
            m.delete(op.keys[0])
        else:
            m.delete_batch(_joined(op.keys))
        self.entries_written += len(op)

    def read(self, wanted: Entries, names: Iterable[str] = MAP_ORDER) -> Entries:
        """What the maps hold now: every entry of hash and trie maps; for array maps, the slots
        that `wanted` uses (every index of an array exists, so only those are meaningful).

        Whole maps are read with `BpfMap.dump` (bpf_map_lookup_batch: a million routes in about
        a second, where one lookup per entry took ~40 s); a few array slots with lookups."""
        out: Entries = {}
        for name in names:
            m = self.maps.maps[name]
            size = m.value_size
            if name in ARRAY_MAPS:
                want = wanted.get(name, {})
                if len(want) <= _FEW:
                    got = {}
                    for k in want:
                        v = m.lookup(k)
                        if v is not None:
                            got[k] = v[:size]
                    out[name] = got
                else:
                    out[name] = _pick(m.dump(), m.key_size, m.value_stride, size, want)
            else:
                out[name] = _records(m.dump(), m.key_size, m.value_stride, size)
        return out


_FEW = 64


def _joined(records: Sequence[bytes]) -> bytes:
    """One contiguous buffer of a batch's records (a RecordList is one already)."""
    return records.buffer if isinstance(records, RecordList) else b"".join(records)


def program(maps: GatewayMaps | MapSink, new: Entries, old: Entries | None = None,
            netns: str | None = None) -> list[MapOp]:
    """Turn the maps holding old (None: empty maps) into new: diff, then apply each batch in
    make-before-break order. Returns the operations performed."""
    sink = maps if isinstance(maps, MapSink) else MapSink(maps, netns)
    ops = diff_entries(old or {}, new)
    for op in ops:
        sink.apply(op)
    return ops


def _records(dump: tuple[bytes, bytes, int], ks: int, stride: int, size: int
             ) -> dict[bytes, bytes]:
    keys, values, n = dump
    if n == 0:
        return {}
    v = np.frombuffer(values, np.uint8).reshape(n, stride)
    if stride != size:
        v = np.ascontiguousarray(v[:, :size])
    return dict(zip(split(keys, ks), split(v.tobytes(), size)))


def _pick(dump: tuple[bytes, bytes, int], ks: int, stride: int, size: int,
          want: Iterable[bytes]) -> dict[bytes, bytes]:
    """The slots of an array map named by want (u32 index keys), from a dump."""
    keys, values, n = dump
    want = list(want)
    if n == 0 or not want:
        return {}
    have = np.frombuffer(keys, "<u4", count=n * ks // 4).reshape(n, ks // 4)[:, 0]
    idx = np.frombuffer(b"".join(want), "<u4").reshape(len(want), -1)[:, 0]
    order = np.argsort(have, kind="stable")
    pos = np.minimum(np.searchsorted(have[order], idx), n - 1)
    found = have[order][pos] == idx
    rows = order[pos[found]]
    v = np.frombuffer(values, np.uint8).reshape(n, stride)[rows, :size]
    return dict(zip([k for k, f in zip(want, found.tolist()) if f],
                    split(np.ascontiguousarray(v).tobytes(), size)))
