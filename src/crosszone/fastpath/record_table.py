"""The writer side of the fast path's double-buffered records (`bpf/maps.h`, `CZ_RECORD`).

config, ports, vpcs, ecmp_groups and nexthops hold records of more than one word (a VPC is 136
bytes) that packets read while the control plane changes them. The kernel writes an ARRAY map's
value with a plain memcpy, so a record rewritten in place could be read half old and half new.
Instead each record i has two copies in its array, at 2i and 2i + 1, and `<map>_sel[i]` (0 or 1)
names the live one. A put:

1. waits, if needed, for an RCU grace period since this record's last flip (`grace.Grace`): the
   copy that is not live now was live then, and packets that picked it must have finished;
2. writes the new value into that copy (no packet can pick it: the selector names the other);
3. flips the selector (one aligned store that changes only its lowest byte, 0 <-> 1, so it
   cannot be read torn), after the copy (x86-64 store order, `grace.require_tso`);
4. marks a new generation, so a grace period starts in the background.

A packet reads the selector once and then one whole copy: the old record or the new one, never
a mix. `RecordMap` looks like a `BpfMap` of the logical array (index -> record), so the encoder,
the diff and the sink name entries as before; what the maps hold reads back as the live copies.
One writer at a time (as for the slot tables).
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from crosszone.fastpath.grace import Grace, map_identity, process_grace, require_tso
from crosszone.fastpath.libbpf_abi import BpfError

#: The double-buffered maps of the gateway program (each has a `<name>_sel` selector array).
RECORD_MAPS = ("config", "ports", "vpcs", "ecmp_groups", "nexthops")


def _keys(data: bytes | Sequence[bytes], what: str) -> np.ndarray:
    buf = data if isinstance(data, bytes | bytearray | memoryview) else b"".join(data)
    if len(buf) % 4:
        raise BpfError(errno.EINVAL, "record put", what, f"{len(buf)} bytes of u32 keys")
    return np.frombuffer(buf, "<u4").astype(np.int64)


def _u32s(idx: np.ndarray) -> bytes:
    return idx.astype("<u4").tobytes()


class RecordMap:
    """A logical array map (BpfMap-like) kept as two copies per record and a selector array."""

    def __init__(self, name: str, copies: Any, sel: Any, grace: Grace | None = None) -> None:
        require_tso(name)
        if copies.max_entries != 2 * sel.max_entries or sel.value_size != 4:
            raise BpfError(errno.EINVAL, "record table", name,
                           f"{copies.max_entries} copies for {sel.max_entries} selectors of "
                           f"{sel.value_size} bytes; expected two copies per u32 selector")
        self.name = name
        self.copies = copies
        self.sel = sel
        self.grace = grace if grace is not None else process_grace()
        self.key_size = 4
        self.value_size = copies.value_size
        self.value_stride = copies.value_stride
        self.max_entries = sel.max_entries
        # Generation of each record's last flip in this process; a record not flipped here may
        # have been flipped by a previous writer just before it stopped: generation 0.
        self._flipped = self.grace.flips.setdefault(map_identity(copies), {})

    def __repr__(self) -> str:
        return f"RecordMap({self.name!r})"

    def selectors(self, idx: np.ndarray) -> np.ndarray:
        """The live copy (0 or 1) of each index."""
        if len(idx) <= 64:
            return np.array([int.from_bytes(self.sel.lookup(_u32s(np.array([i]))) or bytes(4),
                                            "little") & 1 for i in idx.tolist()], np.int64)
        keys, values, n = self.sel.dump()
        have = np.frombuffer(keys, "<u4", count=n).astype(np.int64)
        live = np.zeros(self.max_entries, np.int64)
        live[have] = np.frombuffer(values, "<u4", count=n) & 1
        return live[idx]

    def update_batch(self, keys: bytes | Sequence[bytes], values: bytes | Sequence[bytes]) -> int:
        """Put records (the last of a duplicate index wins); returns the count."""
        idx = _keys(keys, self.name)
        vbuf = values if isinstance(values, bytes | bytearray | memoryview) else b"".join(values)
        if len(vbuf) != len(idx) * self.value_stride:
            raise BpfError(errno.EINVAL, "record put", self.name,
                           f"{len(idx)} keys but {len(vbuf)} bytes of values")
        if not len(idx):
            return 0
        if int(idx.max()) >= self.max_entries:
            raise BpfError(errno.E2BIG, "record put", self.name,
                           f"index {int(idx.max())} past {self.max_entries} records")
        vals = np.frombuffer(vbuf, np.uint8).reshape(len(idx), self.value_stride)
        _, last = np.unique(idx[::-1], return_index=True)
        keep = np.sort(len(idx) - 1 - last)
        idx, vals = idx[keep], vals[keep]
        # 1. the copies about to be written were live at their record's last flip
        self.grace.wait_for(max(self._flipped.get(i, 0) for i in idx.tolist()))
        live = self.selectors(idx)
        spare = 1 - live
        # 2. the new values into the copies no packet can pick, 3. then the selectors
        self.copies.update_batch(_u32s(2 * idx + spare), np.ascontiguousarray(vals).tobytes())
        self.sel.update_batch(_u32s(idx), _u32s(spare))
        # 4. the old copies may be in use until a grace period has passed
        gen = self.grace.mark()
        self._flipped.update(dict.fromkeys(idx.tolist(), gen))
        return len(idx)

    def update(self, key: bytes, value: bytes) -> None:
        """Put one record."""
        self.update_batch(key, value)

    def delete(self, key: bytes) -> bool:
        """Array maps cannot delete (EINVAL, as the kernel's)."""
        raise BpfError(errno.EINVAL, "bpf_map_delete_elem", self.name, "an array map")

    def delete_batch(self, keys: bytes | Sequence[bytes]) -> int:
        """Array maps cannot delete (EINVAL, as the kernel's)."""
        raise BpfError(errno.EINVAL, "bpf_map_delete_batch", self.name, "an array map")

    def lookup(self, key: bytes) -> bytes | None:
        """The live copy of one record (None past the end)."""
        idx = _keys(key, self.name)
        if len(idx) != 1 or idx[0] >= self.max_entries:
            return None
        i = int(idx[0])
        return self.copies.lookup(_u32s(np.array([2 * i + int(self.selectors(idx)[0])])))

    def dump(self) -> tuple[bytes, bytes, int]:
        """(keys, values, n): every index with its live copy (`BpfMap.dump`'s shape)."""
        n = self.max_entries
        idx = np.arange(n, dtype=np.int64)
        live = self.selectors(idx)
        keys, values, got = self.copies.dump()
        have = np.frombuffer(keys, "<u4", count=got).astype(np.int64)
        rows = np.empty(2 * n, np.int64)
        rows[have] = np.arange(got)
        v = np.frombuffer(values, np.uint8).reshape(got, self.value_stride)
        picked = v[rows[2 * idx + live]]
        return _u32s(idx), np.ascontiguousarray(picked).tobytes(), n


def wrap_records(maps: Mapping[str, Any], grace: Grace | None = None) -> dict[str, Any]:
    """maps with each double-buffered array replaced by the logical map it holds (the copies
    stay reachable as `<name>_copies`)."""
    out: dict[str, Any] = dict(maps)
    for name in RECORD_MAPS:
        if name in maps and f"{name}_sel" in maps:
            out[f"{name}_copies"] = maps[name]
            out[name] = RecordMap(name, maps[name], maps[f"{name}_sel"], grace)
    return out
