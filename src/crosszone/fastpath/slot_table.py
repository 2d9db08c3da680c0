"""The writer side of the fast path's slot tables (`bpf/slots.h`): exact-match maps kept as open
addressing in mmapable BPF array maps.

`SlotMap` looks like a `BpfMap` of the logical map it holds: `routes4` keyed by struct
cz_route4_key, `routes6` by cz_route6_key, `vtep_allowed` by cz_vtep_key. So the compiler, the
diff and the sink keep naming entries as they always did. Underneath, every operation is numpy
over the map's memory, mapped into this process:

- a key's home slot is the same hash as the C side (`home`), a key sits within
  `CZ_SLOT_PROBES` slots of it, and lookups walk from home to the key or to an empty slot;
- a put writes the value words of a slot first and its key word last, each an aligned 8-byte
  store, so the fast path sees either no key or the key with its whole value; a put of an
  existing key rewrites just its value word (one store);
- a delete turns the key word into `DELETED`: lookups walk past it, and no other key's probe
  sequence is ever cut while packets are in flight. A put reuses a deleted slot only after an
  RCU grace period since the delete (`grace.Grace`, usually over in the background by then): a
  packet that matched the old key just before the delete may still read that slot's value
  words, and must not find another key's value there.

Store order: value words before the key word is the order other CPUs see on x86-64 (TSO);
Python cannot emit a fence, so other architectures are refused (`grace.require_tso`).

The table itself is the only state (no index in Python), so any number of `SlotMap`s over the
same pinned map agree, and an agent that restarts reads what is there. One writer at a time.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from crosszone.abi import layout as L
from crosszone.compile import encode as enc
from crosszone.fastpath.grace import Grace, map_identity, process_grace, require_tso
from crosszone.fastpath.libbpf_abi import BpfError

EMPTY = np.uint64(0)
DELETED = np.uint64(1)
LIVE = np.uint64(1 << 63)
_PHI = np.uint64(0x9E3779B97F4A7C15)
_MUL_HI, _MUL_LO = np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)


def fib_home(k: np.ndarray, bits: int) -> np.ndarray:
    """cz_slot_home: the top `bits` of k * 2^64/phi (uint64 arithmetic wraps like C's)."""
    return ((k * _PHI) >> np.uint64(64 - bits)).astype(np.int64)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Kind:
    """One logical map: its C key and value layouts and its slot table."""

    name: str           # logical map name ("routes4")
    table: str          # the BPF array holding the slots ("route4_slots")
    key: np.dtype       # logical key (the control plane's struct)
    value: np.dtype     # logical value
    words: int          # u64 words per slot: key word, [hi, lo,] value word
    bits: int           # log2 of the home slots; CZ_SLOT_PROBES overflow slots follow
    capacity: int       # most live keys the writer accepts (a quarter of the slots at most)

    def pack(self, keys: np.ndarray) -> np.ndarray:
        """Logical keys -> (n, words - 1) uint64: the key word, then the address halves."""
        n = len(keys)
        out = np.empty((n, self.words - 1), np.uint64)
        if self.name == "vtep_allowed":
            out[:, 0] = LIVE | (keys["vni"].astype(np.uint64) << np.uint64(L.CZ_SLOT_VNI_SHIFT)) | (
                keys["vtep"].astype(np.uint64))
            return out
        word = LIVE | (keys["vpc_id"].astype(np.uint64) << np.uint64(L.CZ_SLOT_VPC_SHIFT)) | (
            keys["plen"].astype(np.uint64) << np.uint64(L.CZ_SLOT_PLEN_SHIFT))
        if self.name == "routes4":
            out[:, 0] = word | keys["addr"].astype(np.uint64)
        else:
            out[:, 0], out[:, 1:] = word, keys["addr"]
        return out

    def unpack(self, packed: np.ndarray) -> np.ndarray:
        """(n, words - 1) uint64 -> logical keys."""
        keys = np.zeros(len(packed), self.key)
        w = packed[:, 0]
        if self.name == "vtep_allowed":
            keys["vni"] = (w >> np.uint64(L.CZ_SLOT_VNI_SHIFT)) & np.uint64(0xFFFFFF)
            keys["vtep"] = w & np.uint64(0xFFFFFFFF)
            return keys
        keys["vpc_id"] = (w >> np.uint64(L.CZ_SLOT_VPC_SHIFT)) & np.uint64(0xFFF)
        keys["plen"] = (w >> np.uint64(L.CZ_SLOT_PLEN_SHIFT)) & np.uint64(0xFF)
        if self.name == "routes4":
            keys["addr"] = w & np.uint64(0xFFFFFFFF)
        else:
            keys["addr"] = packed[:, 1:3]
        return keys

    @property
    def slots(self) -> int:
        """Home slots."""
        return 1 << self.bits

    def home(self, packed: np.ndarray) -> np.ndarray:
        """Home slot of each packed key (cz_slot_home / cz_slot_home6)."""
        if self.words == 2:
            return fib_home(packed[:, 0], self.bits)
        return fib_home(packed[:, 0] ^ (packed[:, 1] * _MUL_HI) ^ (packed[:, 2] * _MUL_LO),
                        self.bits)


def as_loaded(dtype: np.dtype) -> np.dtype:
    """A key layout with its big-endian (network order) fields read as little-endian words.

    Addresses are network order in memory; the fast path packs them as it loads them from the
    packet, a little-endian word on x86. The same bytes seen through this view give the words
    the program computes, so the slot keys are the encoder's keys (`compile.encode`, derived
    from the mirrors in abi/layout.py) with no layout declared here."""
    names = list(dtype.names or ())
    fields: Mapping[str, Any] = dtype.fields or {}

    def le(t: np.dtype) -> np.dtype:
        if t.subdtype is not None:
            return np.dtype((t.subdtype[0].newbyteorder("<"), t.subdtype[1]))
        return t.newbyteorder("<")
    return np.dtype({"names": names, "formats": [le(fields[n][0]) for n in names],
                     "offsets": [fields[n][1] for n in names], "itemsize": dtype.itemsize})


ROUTE = enc.ROUTE  # the value of both route tables

ROUTES4 = Kind("routes4", "route4_slots", as_loaded(enc.ROUTE4_KEY), ROUTE, 2,
               L.CZ_ROUTE4_SLOT_BITS, L.CZ_MAX_ROUTES4)
ROUTES6 = Kind("routes6", "route6_slots", as_loaded(enc.ROUTE6_KEY), ROUTE, 4,
               L.CZ_ROUTE6_SLOT_BITS, L.CZ_MAX_ROUTES6)
VTEPS = Kind("vtep_allowed", "vtep_slots", as_loaded(enc.VTEP_KEY), enc.U32, 2,
             L.CZ_VTEP_SLOT_BITS, L.CZ_MAX_VTEPS)
KINDS = (ROUTES4, ROUTES6, VTEPS)


class ArrayTable(Protocol):
    """What a slot table needs of its BPF array: a `BpfMap`, or a `testing.fake_maps.FakeMap`."""

    name: str
    value_size: int
    max_entries: int

    def mmap_values(self) -> Any:
        """The array's values as a writable buffer shared with the fast path."""


def _records(data: bytes | Sequence[bytes], dtype: np.dtype, what: str) -> np.ndarray:
    buf = data if isinstance(data, bytes | bytearray | memoryview) else b"".join(data)
    if len(buf) % dtype.itemsize:
        raise ValueError(f"{what}: {len(buf)} bytes is not a whole number of "
                         f"{dtype.itemsize}-byte records")
    return np.frombuffer(buf, dtype)


class SlotMap:
    """A logical exact-match map (BpfMap-like) stored in a slot table."""

    def __init__(self, kind: Kind, table: ArrayTable, grace: Grace | None = None) -> None:
        require_tso(table.name)
        want = (kind.words * 8, kind.slots + L.CZ_SLOT_PROBES)
        if (table.value_size, table.max_entries) != want:
            raise BpfError(errno.EINVAL, "slot table", table.name,
                           f"value size / entries {table.value_size} / {table.max_entries}, "
                           f"expected {want[0]} / {want[1]}")
        self.kind = kind
        self.table = table
        self.grace = grace if grace is not None else process_grace()
        self._ident = map_identity(table)
        self.name = kind.name
        self.key_size = kind.key.itemsize
        self.value_size = self.value_stride = kind.value.itemsize
        self.max_entries = kind.capacity
        self._bytes = table.value_size * table.max_entries
        self._view: np.ndarray | None = None
        # Live keys, counted once by a scan and then kept by this writer's own puts and deletes
        # (a scan per batch made a one-route change take p50 52 ms in `bench control`, 18 ms
        # without it).
        self._live: int | None = None

    def __repr__(self) -> str:
        return f"SlotMap({self.name!r} in {self.table.name!r})"

    def slots(self) -> np.ndarray:
        """The table's memory as (slots, words) uint64, writable. Mapped once (remapping per call
        would fault in every page a scan touches again); the mapping holds the map, and its
        memory, until `close` or until this object is freed."""
        if self._view is None:
            mm = self.table.mmap_values()
            self._view = np.frombuffer(mm, np.uint64, self._bytes // 8).reshape(
                -1, self.kind.words)
        return self._view

    def close(self) -> None:
        """Unmap the table (the mapping goes with the last view of it)."""
        self._view = None

    def _find(self, s: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Slot of each packed key, or -1 (the walk of cz_*_probe, vectorised)."""
        n = len(packed)
        found = np.full(n, -1, np.int64)
        home = self.kind.home(packed)
        cols = packed.shape[1]
        if n == 1:  # one key (a single change, a lookup): a plain walk, no array round trips
            want = packed[0].tolist()
            h = int(home[0])
            for p in range(L.CZ_SLOT_PROBES):
                row = s[h + p, :cols].tolist()
                if row == want:
                    found[0] = h + p
                    break
                if row[0] == 0:
                    break
            return found
        pending = np.arange(n)
        for p in range(L.CZ_SLOT_PROBES):
            if not len(pending):
                break
            idx = home[pending] + p
            got = s[idx, :cols]
            match = (got == packed[pending]).all(axis=1)
            found[pending[match]] = idx[match]
            pending = pending[~(match | (got[:, 0] == EMPTY))]
        return found

    def _place(self, s: np.ndarray, packed: np.ndarray) -> np.ndarray:
        """Free slots for keys known to be absent: each takes the first slot from its home that
        is empty or deleted and not taken by a key earlier in the batch."""
        n = len(packed)
        slot = np.full(n, -1, np.int64)
        home = self.kind.home(packed)
        taken = np.zeros(len(s), bool)  # slots claimed by this batch (values not yet written)
        pending = np.arange(n)
        for p in range(L.CZ_SLOT_PROBES):
            if not len(pending):
                break
            idx = home[pending] + p
            cand = np.flatnonzero((s[idx, 0] <= DELETED) & ~taken[idx])
            _, first = np.unique(idx[cand], return_index=True)
            win = cand[first]
            slot[pending[win]] = idx[win]
            taken[idx[win]] = True
            left = np.ones(len(pending), bool)
            left[win] = False
            pending = pending[left]
        if len(pending):
            raise BpfError(errno.E2BIG, "slot put", self.name,
                           f"{len(pending)} keys found no free slot within "
                           f"{L.CZ_SLOT_PROBES} of home; the table is too full")
        return slot

    def live(self) -> int:
        """Keys held (counted afresh)."""
        s = self.slots()
        self._live = int(np.count_nonzero(s[:, 0] >= LIVE))
        return self._live

    def update_batch(self, keys: bytes | Sequence[bytes], values: bytes | Sequence[bytes]) -> int:
        """Insert or replace keys (the last of a duplicate key wins). Returns the count."""
        k = _records(keys, self.kind.key, f"{self.name} keys")
        v = _records(values, self.kind.value, f"{self.name} values")
        if len(k) != len(v):
            raise ValueError(f"{self.name}: {len(k)} keys but {len(v)} values")
        if not len(k):
            return 0
        packed = self.kind.pack(k)
        # last occurrence of each key: unique over the reversed batch
        _, last = np.unique(packed[::-1].copy().view(f"V{packed.shape[1] * 8}"),
                            return_index=True)
        keep = np.sort(len(k) - 1 - last)
        packed = packed[keep]
        vw = np.zeros(len(keep), np.uint64)
        vw.view(np.uint8).reshape(-1, 8)[:, : self.value_size] = (
            np.ascontiguousarray(v[keep]).view(np.uint8).reshape(-1, self.value_size))
        s = self.slots()
        at = self._find(s, packed)
        old = at >= 0
        new = ~old
        n_live = self._live if self._live is not None else self.live()
        if n_live + int(new.sum()) > self.kind.capacity:
            raise BpfError(errno.E2BIG, "slot put", self.name,
                           f"{n_live} held + {int(new.sum())} new > capacity "
                           f"{self.kind.capacity}")
        s[at[old], -1] = vw[old]              # replace: one value store each
        free = self._place(s, packed[new])
        if len(free) and bool((s[free, 0] == DELETED).any()):
            # reusing deleted slots: packets that found their old keys must be done with them
            self.grace.wait_for(self.grace.deletes.get(self._ident, 0))
        last_col = packed.shape[1]
        if last_col > 1:
            s[free, 1:last_col] = packed[new, 1:]
        s[free, -1] = vw[new]                 # the value words before ...
        s[free, 0] = packed[new, 0]           # ... the key words that make them visible
        self._live = n_live + len(free)
        return len(k)

    def update(self, key: bytes, value: bytes) -> None:
        """Insert or replace one key."""
        self.update_batch(key, value)

    def delete_batch(self, keys: bytes | Sequence[bytes]) -> int:
        """Mark keys deleted; returns how many were there."""
        k = _records(keys, self.kind.key, f"{self.name} keys")
        if not len(k):
            return 0
        s = self.slots()
        at = self._find(s, self.kind.pack(k))
        at = np.unique(at[at >= 0])
        s[at, 0] = DELETED
        if len(at):
            self.grace.deletes[self._ident] = self.grace.mark()
        if self._live is not None:
            self._live -= len(at)
        return len(at)

    def delete(self, key: bytes) -> bool:
        """Mark one key deleted; False if absent."""
        return self.delete_batch(key) == 1

    def lookup(self, key: bytes) -> bytes | None:
        """The value of one key, or None."""
        k = _records(key, self.kind.key, f"{self.name} key")
        s = self.slots()
        at = int(self._find(s, self.kind.pack(k))[0])
        if at < 0:
            return None
        return bytes(s[at, -1:].tobytes()[: self.value_size])

    def dump(self) -> tuple[bytes, bytes, int]:
        """(keys, values, n) of every live key, in slot order (`BpfMap.dump`'s shape)."""
        s = self.slots()
        rows = np.flatnonzero(s[:, 0] & LIVE)
        got = s[rows].copy()
        keys = self.kind.unpack(got[:, :-1])
        vals = got[:, -1].copy().view(np.uint8).reshape(-1, 8)[:, : self.value_size]
        return keys.tobytes(), np.ascontiguousarray(vals).tobytes(), len(rows)

    def probe_lengths(self) -> np.ndarray:
        """Distance of every live key from its home slot (a test and capacity diagnostic)."""
        s = self.slots()
        rows = np.flatnonzero(s[:, 0] & LIVE)
        packed = s[rows, :-1].copy()
        return rows - self.kind.home(packed)  # type: ignore[no-any-return]


def wrap(maps: Mapping[str, Any], grace: Grace | None = None) -> dict[str, Any]:
    """maps with each slot table also reachable as the logical map it holds."""
    out: dict[str, Any] = dict(maps)
    for kind in KINDS:
        if kind.table in maps:
            out[kind.name] = SlotMap(kind, maps[kind.table], grace)
    return out
