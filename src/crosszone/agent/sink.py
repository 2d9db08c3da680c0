"""The adapter that applies map operations to a gateway's pinned BPF maps, and reads them back.

This is the only place the agent touches the kernel's tables: `compile.diff` plans, `MapSink`
performs. Batches go through bpf_map_update_batch/delete_batch (libbpf falls back to one call per
entry for map types without batch support, e.g. the devmap).

The devmap (`tx_ports`) is written from inside the gateway's network namespace: the kernel
resolves a devmap value's ifindex in the namespace of the process that writes it, so a write
from the root namespace would point the slot at whatever device has that index there.
"""

from __future__ import annotations

from collections.abc import Iterable

from crosszone.compile.diff import ARRAY_MAPS, MAP_ORDER, Entries, MapOp
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.netns import in_netns

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
                m.update_batch(b"".join(op.keys), b"".join(op.values))
        elif len(op) == 1:
            m.delete(op.keys[0])
        else:
            m.delete_batch(b"".join(op.keys))
        self.entries_written += len(op)

    def read(self, wanted: Entries, names: Iterable[str] = MAP_ORDER) -> Entries:
        """What the maps hold now: every entry of hash and trie maps; for array maps, the slots
        that `wanted` uses (every index of an array exists, so only those are meaningful)."""
        out: Entries = {}
        for name in names:
            m = self.maps.maps[name]
            size = m.value_size
            if name in ARRAY_MAPS:
                got = {}
                for k in wanted.get(name, {}):
                    v = m.lookup(k)
                    if v is not None:
                        got[k] = v[:size]
                out[name] = got
            else:
                out[name] = {k: v[:size] for k, v in m.items()}
        return out
