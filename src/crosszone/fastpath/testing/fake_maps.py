"""A pure-Python stand-in for `BpfMap` (in the spirit of pyroute2's mock backend), so that map
writing, the slot tables and the sink are unit-tested without root or a kernel.

`FakeMap` keeps the semantics the code relies on, per map type:

- array maps (ARRAY, PERCPU_ARRAY): every index exists and reads as zeros until written; an index
  past max_entries cannot be written (E2BIG) and nothing can be deleted (EINVAL); a
  BPF_F_MMAPABLE array's values live in an anonymous mapping that `mmap_values` returns, shared
  with lookups and updates, as the kernel's is (the slot tables write through it);
- hash maps (HASH, PERCPU_HASH, DEVMAP_HASH) and the devmap: an absent key reads as None, a new
  key past max_entries fails with E2BIG (devmap: an index past max_entries);
- LPM tries: keys are a u32 prefix length and the data; a lookup is a longest-prefix match, as
  bpf_map_lookup_elem is on a trie; a prefix length past the data's bits is EINVAL.

Errors are the real backend's `BpfError` with the same errno and call name; a batch stops at the
failing entry with the entries before it written, as the kernel's does. `fake_gateway` builds the
maps an object file defines (read without loading it) as a `GatewayMaps`.
"""

from __future__ import annotations

import errno
import mmap
from collections.abc import Iterator, Sequence
from pathlib import Path

from crosszone.fastpath.libbpf import BPF_ANY, BpfError, MapSpec, MapType, map_specs
from crosszone.fastpath.libbpf_abi import BPF_EXIST, BPF_NOEXIST, _as_buffer, _round8
from crosszone.fastpath.maps_io import GatewayMaps

BPF_F_MMAPABLE = 1 << 10
_ARRAYS = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
_PERCPU = frozenset({MapType.PERCPU_ARRAY, MapType.PERCPU_HASH})
_INDEXED = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY, MapType.DEVMAP})
FAKE_CPUS = 2


class FakeMap:
    """A BPF map held in this process (a `BpfMap` look-alike)."""

    def __init__(self, name: str, map_type: int, key_size: int, value_size: int,
                 max_entries: int, map_flags: int = 0, ncpus: int = FAKE_CPUS) -> None:
        self.name = name
        self.fd = -1
        self.map_type = MapType(map_type)
        self.key_size = key_size
        self.value_size = value_size
        self.max_entries = max_entries
        self.map_flags = map_flags
        self.use_batch_syscall = True
        self.percpu = self.map_type in _PERCPU
        self.ncpus = ncpus if self.percpu else 1
        self.value_stride = _round8(value_size) * self.ncpus if self.percpu else value_size
        self._entries: dict[bytes, bytes] = {}
        self._mem: mmap.mmap | None = None
        if self.map_type in _ARRAYS and map_flags & BPF_F_MMAPABLE:
            # anonymous and zero-filled: pages are allocated only when touched
            size = -(-(value_size * max_entries) // mmap.PAGESIZE) * mmap.PAGESIZE
            self._mem = mmap.mmap(-1, size)

    @classmethod
    def of(cls, spec: MapSpec, ncpus: int = FAKE_CPUS) -> FakeMap:
        """The stand-in of a map an object defines."""
        return cls(spec.name, spec.map_type, spec.key_size, spec.value_size, spec.max_entries,
                   spec.map_flags, ncpus)

    def __repr__(self) -> str:
        return (f"FakeMap({self.name!r}, type={self.map_type!r}, key={self.key_size}, "
                f"value={self.value_size}, max={self.max_entries})")

    def close(self) -> None:
        """Nothing to release (the mapping goes with the last view of it)."""

    def mmap_values(self) -> mmap.mmap:
        """The values of a BPF_F_MMAPABLE array, shared with lookups and updates."""
        if self._mem is None:
            raise BpfError(errno.EINVAL, "mmap", self.name, "not a BPF_F_MMAPABLE array")
        return self._mem

    # -- checks shared by single and batch calls ------------------------------------------

    def _key(self, key: bytes, call: str) -> bytes:
        if len(key) != self.key_size:
            raise BpfError(errno.EINVAL, call, self.name,
                           f"key is {len(key)} bytes, map expects {self.key_size}")
        return bytes(key)

    def _index(self, key: bytes) -> int:
        return int.from_bytes(key[:4], "little")

    def _prefixlen(self, key: bytes) -> int:
        return int.from_bytes(key[:4], "little")

    def _store(self, key: bytes, value: bytes, flags: int, call: str) -> None:
        """One update: raises BpfError(errno, call) like bpf_map_update_elem."""
        t = self.map_type
        if t in _INDEXED:
            if self._index(key) >= self.max_entries:
                raise BpfError(errno.E2BIG, call, self.name)
            if flags == BPF_NOEXIST and t in _ARRAYS:
                raise BpfError(errno.EEXIST, call, self.name)
        elif t == MapType.LPM_TRIE and self._prefixlen(key) > (self.key_size - 4) * 8:
            raise BpfError(errno.EINVAL, call, self.name)
        if t not in _ARRAYS:
            present = key in self._entries
            if flags == BPF_NOEXIST and present:
                raise BpfError(errno.EEXIST, call, self.name)
            if flags == BPF_EXIST and not present:
                raise BpfError(errno.ENOENT, call, self.name)
            if not present and t not in _INDEXED and len(self._entries) >= self.max_entries:
                raise BpfError(errno.E2BIG, call, self.name)
        if self._mem is not None:
            at = self._index(key) * self.value_size
            self._mem[at:at + self.value_size] = value
        else:
            self._entries[key] = bytes(value)

    def _load(self, key: bytes) -> bytes | None:
        t = self.map_type
        if t in _INDEXED and self._index(key) >= self.max_entries:
            return None
        if self._mem is not None:
            at = self._index(key) * self.value_size
            return bytes(self._mem[at:at + self.value_size])
        if t == MapType.LPM_TRIE:
            return self._longest_match(key)
        got = self._entries.get(key)
        if got is None and t in _ARRAYS:
            return bytes(self.value_stride)
        return got

    def _longest_match(self, key: bytes) -> bytes | None:
        want = int.from_bytes(key[4:], "big")
        bits = (self.key_size - 4) * 8
        best, best_len = None, -1
        for k, v in self._entries.items():
            plen = self._prefixlen(k)
            if best_len < plen <= self._prefixlen(key):
                shift = bits - plen
                if (int.from_bytes(k[4:], "big") >> shift) == (want >> shift):
                    best, best_len = v, plen
        return best

    def _remove(self, key: bytes, call: str) -> bool:
        if self.map_type in _ARRAYS:
            raise BpfError(errno.EINVAL, call, self.name)
        return self._entries.pop(key, None) is not None

    # -- the BpfMap interface ---------------------------------------------------------------

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        """Create or update one entry."""
        k = self._key(key, "bpf_map_update_elem")
        if len(value) != self.value_stride:
            raise BpfError(errno.EINVAL, "bpf_map_update_elem", self.name,
                           f"value is {len(value)} bytes, map expects {self.value_stride}")
        self._store(k, value, flags, "bpf_map_update_elem")

    def update_percpu(self, key: bytes, values: Sequence[bytes], flags: int = BPF_ANY) -> None:
        """Update a per-CPU entry from one value per CPU."""
        slot = _round8(self.value_size)
        if len(values) != self.ncpus or any(len(v) != self.value_size for v in values):
            raise BpfError(errno.EINVAL, "bpf_map_update_elem", self.name,
                           f"need {self.ncpus} values of {self.value_size} bytes")
        self.update(key, b"".join(v.ljust(slot, b"\0") for v in values), flags)

    def lookup(self, key: bytes) -> bytes | None:
        """Value for key, or None if absent (a trie: the longest prefix that matches)."""
        return self._load(self._key(key, "bpf_map_lookup_elem"))

    def lookup_percpu(self, key: bytes) -> list[bytes]:
        """One value per CPU."""
        if not self.percpu:
            raise BpfError(errno.EINVAL, "lookup_percpu", self.name, "not a per-CPU map")
        raw = self.lookup(key)
        if raw is None:
            return []
        slot = _round8(self.value_size)
        return [raw[i * slot:i * slot + self.value_size] for i in range(self.ncpus)]

    def delete(self, key: bytes) -> bool:
        """Delete one entry; False if it was absent."""
        return self._remove(self._key(key, "bpf_map_delete_elem"), "bpf_map_delete_elem")

    def update_batch(self, keys: bytes | Sequence[bytes], values: bytes | Sequence[bytes],
                     flags: int = BPF_ANY) -> int:
        """Write many entries in order; a failure names the entry, those before it stay."""
        kb = _as_buffer(keys, self.key_size, "key", self.name)
        vb = _as_buffer(values, self.value_stride, "value", self.name)
        ks, vs = self.key_size, self.value_stride
        n = len(kb) // ks
        if len(vb) // vs != n:
            raise BpfError(errno.EINVAL, "update_batch", self.name,
                           f"{n} keys but {len(vb) // vs} values")
        for i in range(n):
            try:
                self._store(kb[i * ks:(i + 1) * ks], vb[i * vs:(i + 1) * vs], flags,
                            "bpf_map_update_batch")
            except BpfError as e:
                raise BpfError(e.errno or errno.EIO, "bpf_map_update_batch", self.name,
                               f"entry #{i} of {n}") from None
        return n

    def delete_batch(self, keys: bytes | Sequence[bytes]) -> int:
        """Delete many keys; returns how many existed."""
        kb = _as_buffer(keys, self.key_size, "key", self.name)
        ks = self.key_size
        return sum(self._remove(kb[i:i + ks], "bpf_map_delete_elem")
                   for i in range(0, len(kb), ks))

    def keys(self) -> Iterator[bytes]:
        """Every key (every index of an array)."""
        if self.map_type in _ARRAYS:
            return (i.to_bytes(self.key_size, "little") for i in range(self.max_entries))
        return iter(list(self._entries))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value)."""
        for k in self.keys():
            v = self._load(k) if self.map_type != MapType.LPM_TRIE else self._entries.get(k)
            if v is not None:
                yield k, v

    def dump(self, chunk: int = 0) -> tuple[bytes, bytes, int]:
        """(keys, values, n) as contiguous buffers, like `BpfMap.dump`."""
        ks, vs = [], []
        for k, v in self.items():
            ks.append(k)
            vs.append(v)
        return b"".join(ks), b"".join(vs), len(ks)

    def pin(self, path: str | Path) -> None:
        """Pins need bpffs: not faked."""
        raise BpfError(errno.EPERM, "bpf_obj_pin", self.name, "a fake map cannot be pinned")


def fake_maps(obj_path: str | Path) -> dict[str, FakeMap]:
    """A stand-in for every map the object file defines."""
    return {name: FakeMap.of(spec) for name, spec in map_specs(obj_path).items()}


def fake_gateway(obj_path: str | Path) -> GatewayMaps:
    """The gateway maps of an object file, faked (`GatewayMaps` over `FakeMap`s)."""
    return GatewayMaps(fake_maps(obj_path))
