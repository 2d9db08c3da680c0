"""BpfMap: one BPF map reached through its fd (update, lookup, delete, batches, per-CPU values,
iteration, pins). Part of the libbpf binding (crosszone.fastpath.libbpf)."""

from __future__ import annotations

import ctypes
import errno as errno_mod
import mmap
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Self

from crosszone.fastpath.libbpf_abi import (
    _NO_BATCH,
    _PERCPU_TYPES,
    BATCH_CHUNK,
    BPF_ANY,
    BpfError,
    MapType,
    _as_buffer,
    _BatchOpts,
    _check,
    _delete_batch,
    _delete_elem,
    _errno,
    _info_by_fd,
    _lookup_batch,
    _lookup_elem,
    _map_create,
    _MapCreateOpts,
    _MapInfo,
    _next_key,
    _round8,
    _update_batch,
    _update_elem,
    c_u32,
    obj_get,
    obj_info,
    obj_pin,
    possible_cpus,
)


class BpfMap:
    """A BPF map reached through its fd; sizes and type come from libbpf or the kernel."""

    def __init__(
        self,
        name: str,
        fd: int,
        map_type: int,
        key_size: int,
        value_size: int,
        max_entries: int,
        *,
        owns_fd: bool = False,
    ) -> None:
        self.name = name
        self.fd = fd
        self.map_type: int = (
            MapType(map_type) if map_type in MapType._value2member_map_ else map_type
        )
        self.key_size = key_size
        self.value_size = value_size
        self.max_entries = max_entries
        self._owns_fd = owns_fd
        # False once the kernel said this map type has no batch ops (ENOTSUPP); tests and
        # callers may set it to force the per-entry loop.
        self.use_batch_syscall = True
        self.percpu = map_type in _PERCPU_TYPES
        self.ncpus = possible_cpus() if self.percpu else 1
        # Per-CPU maps exchange round_up(value_size, 8) bytes for each possible CPU.
        self.value_stride = _round8(value_size) * self.ncpus if self.percpu else value_size

    def __repr__(self) -> str:
        return (
            f"BpfMap({self.name!r}, fd={self.fd}, type={self.map_type!r}, "
            f"key={self.key_size}, value={self.value_size}, max={self.max_entries})"
        )

    @classmethod
    def _from_fd(cls, fd: int, name: str | None, owns_fd: bool, target: str) -> BpfMap:
        info = _MapInfo()
        size = c_u32(ctypes.sizeof(info))
        if _info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) < 0:
            err = _errno()
            if owns_fd:
                os.close(fd)
            raise BpfError(err, "bpf_obj_get_info_by_fd", target)
        return cls(
            name or info.name.decode(),
            fd,
            info.type,
            info.key_size,
            info.value_size,
            info.max_entries,
            owns_fd=owns_fd,
        )

    @classmethod
    def from_pinned(cls, path: str | Path) -> BpfMap:
        """Open a map pinned on bpffs; the returned map owns its fd (close() releases it)."""
        return cls._from_fd(obj_get(path), None, True, str(path))

    @classmethod
    def create(
        cls,
        map_type: int,
        key_size: int,
        value_size: int,
        max_entries: int,
        name: str = "",
        map_flags: int = 0,
    ) -> BpfMap:
        """Create a standalone map (bpf_map_create), e.g. for benchmarks and tests."""
        opts = _MapCreateOpts(sz=ctypes.sizeof(_MapCreateOpts), map_flags=map_flags)
        fd = _map_create(
            map_type, name.encode() or None, key_size, value_size, max_entries, ctypes.byref(opts)
        )
        _check(fd, "bpf_map_create", name or f"type {map_type}")
        return cls._from_fd(fd, name, True, name)

    @property
    def id(self) -> int:
        """Kernel map id."""
        return int(obj_info(self.fd, _MapInfo(), self.name).id)  # type: ignore[attr-defined]

    def close(self) -> None:
        """Close the fd if this map owns it (maps of a BpfObject are closed with the object)."""
        if self._owns_fd and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _key(self, key: bytes, call: str) -> bytes:
        if len(key) != self.key_size:
            raise BpfError(
                errno_mod.EINVAL,
                call,
                self.name,
                f"key is {len(key)} bytes, map expects {self.key_size}",
            )
        return bytes(key)

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        """Create or update one entry (bpf_map_update_elem); per-CPU maps take value_stride."""
        k = self._key(key, "bpf_map_update_elem")
        if len(value) != self.value_stride:
            raise BpfError(
                errno_mod.EINVAL,
                "bpf_map_update_elem",
                self.name,
                f"value is {len(value)} bytes, map expects {self.value_stride}",
            )
        if _update_elem(self.fd, k, bytes(value), flags) < 0:
            raise BpfError(_errno(), "bpf_map_update_elem", self.name)

    def update_percpu(self, key: bytes, values: Sequence[bytes], flags: int = BPF_ANY) -> None:
        """Update a per-CPU entry from one value per possible CPU."""
        slot = _round8(self.value_size)
        if len(values) != self.ncpus or any(len(v) != self.value_size for v in values):
            raise BpfError(
                errno_mod.EINVAL,
                "bpf_map_update_elem",
                self.name,
                f"need {self.ncpus} values of {self.value_size} bytes",
            )
        self.update(key, b"".join(v.ljust(slot, b"\0") for v in values), flags)

    def lookup(self, key: bytes) -> bytes | None:
        """Value for key, or None if absent; per-CPU maps return the raw value_stride blob."""
        k = self._key(key, "bpf_map_lookup_elem")
        buf = ctypes.create_string_buffer(self.value_stride)
        if _lookup_elem(self.fd, k, buf) < 0:
            err = _errno()
            if err == errno_mod.ENOENT:
                return None
            raise BpfError(err, "bpf_map_lookup_elem", self.name)
        return buf.raw

    def lookup_percpu(self, key: bytes) -> list[bytes]:
        """One value_size value per possible CPU (the kernel pads each to 8 bytes)."""
        if not self.percpu:
            raise BpfError(errno_mod.EINVAL, "lookup_percpu", self.name, "not a per-CPU map")
        raw = self.lookup(key)
        if raw is None:
            return []
        slot = _round8(self.value_size)
        return [raw[i * slot : i * slot + self.value_size] for i in range(self.ncpus)]

    def delete(self, key: bytes) -> bool:
        """Delete one entry; False if it was absent (bpf_map_delete_elem)."""
        k = self._key(key, "bpf_map_delete_elem")
        if _delete_elem(self.fd, k) < 0:
            err = _errno()
            if err == errno_mod.ENOENT:
                return False
            raise BpfError(err, "bpf_map_delete_elem", self.name)
        return True

    def update_batch(
        self, keys: bytes | Sequence[bytes], values: bytes | Sequence[bytes], flags: int = BPF_ANY
    ) -> int:
        """Write many entries, BATCH_CHUNK per bpf_map_update_batch; loops for types without it."""
        kb = _as_buffer(keys, self.key_size, "key", self.name)
        vb = _as_buffer(values, self.value_stride, "value", self.name)
        n = len(kb) // self.key_size
        if len(vb) // self.value_stride != n:
            raise BpfError(
                errno_mod.EINVAL,
                "update_batch",
                self.name,
                f"{n} keys but {len(vb) // self.value_stride} values",
            )
        if n == 0:
            return 0
        kbuf = (ctypes.c_char * len(kb)).from_buffer_copy(kb)
        vbuf = (ctypes.c_char * len(vb)).from_buffer_copy(vb)
        kaddr, vaddr = ctypes.addressof(kbuf), ctypes.addressof(vbuf)
        ks, vs = self.key_size, self.value_stride
        done = 0
        if self.use_batch_syscall:
            opts = _BatchOpts(sz=ctypes.sizeof(_BatchOpts), elem_flags=flags)
            count = c_u32()
            while done < n:
                count.value = min(BATCH_CHUNK, n - done)
                rc = _update_batch(
                    self.fd,
                    kaddr + done * ks,
                    vaddr + done * vs,
                    ctypes.byref(count),
                    ctypes.byref(opts),
                )
                if rc < 0:
                    err = _errno()
                    # The kernel answers ENOTSUPP before touching count when the map type has
                    # no map_update_batch op (devmap; LPM tries before 6.x). EINVAL: let the
                    # per-entry loop redo the call and name the entry that is wrong.
                    if done == 0 and err in _NO_BATCH:
                        self.use_batch_syscall = False
                        break
                    if done == 0 and err == errno_mod.EINVAL:
                        break
                    raise BpfError(
                        err,
                        "bpf_map_update_batch",
                        self.name,
                        f"entry #{done + count.value} of {n}",
                    )
                done += count.value
            if done == n:
                return done
        # Fallback: one bpf_map_update_elem per entry, pointers into the prebuilt buffers.
        upd, fd = _update_elem, self.fd
        for i in range(n):
            if upd(fd, kaddr + i * ks, vaddr + i * vs, flags) < 0:
                raise BpfError(_errno(), "bpf_map_update_elem", self.name, f"entry #{i} of {n}")
        return n

    def delete_batch(self, keys: bytes | Sequence[bytes]) -> int:
        """Delete many keys; returns how many existed (bpf_map_delete_batch or a loop)."""
        kb = _as_buffer(keys, self.key_size, "key", self.name)
        n = len(kb) // self.key_size
        if n == 0:
            return 0
        kbuf = (ctypes.c_char * len(kb)).from_buffer_copy(kb)
        kaddr, ks = ctypes.addressof(kbuf), self.key_size
        deleted = pos = 0
        if self.use_batch_syscall:
            opts = _BatchOpts(sz=ctypes.sizeof(_BatchOpts))
            count = c_u32()
            while pos < n:
                count.value = min(BATCH_CHUNK, n - pos)
                rc = _delete_batch(
                    self.fd, kaddr + pos * ks, ctypes.byref(count), ctypes.byref(opts)
                )
                err = _errno() if rc < 0 else 0
                if err in _NO_BATCH or err == errno_mod.EINVAL:
                    # count may not have been written back: the loop below takes over from
                    # this chunk and names the failing entry, if any.
                    if err in _NO_BATCH:
                        self.use_batch_syscall = False
                    break
                deleted += count.value
                pos += count.value
                if err == errno_mod.ENOENT:  # the kernel stops at a missing key: skip it
                    pos += 1
                elif err:
                    raise BpfError(err, "bpf_map_delete_batch", self.name, f"entry #{pos} of {n}")
            if pos >= n:
                return deleted
        dele, fd = _delete_elem, self.fd
        for i in range(pos, n):
            if dele(fd, kaddr + i * ks) < 0:
                err = _errno()
                if err != errno_mod.ENOENT:
                    raise BpfError(err, "bpf_map_delete_elem", self.name, f"entry #{i} of {n}")
            else:
                deleted += 1
        return deleted

    def keys(self) -> Iterator[bytes]:
        """Iterate over keys with bpf_map_get_next_key (entries may change meanwhile)."""
        cur = ctypes.create_string_buffer(self.key_size)
        nxt = ctypes.create_string_buffer(self.key_size)
        prev: Any = None
        while True:
            if _next_key(self.fd, prev, nxt) < 0:
                err = _errno()
                if err == errno_mod.ENOENT:
                    return
                raise BpfError(err, "bpf_map_get_next_key", self.name)
            yield nxt.raw
            ctypes.memmove(cur, nxt, self.key_size)
            prev = cur

    def dump(self, chunk: int = BATCH_CHUNK) -> tuple[bytes, bytes, int]:
        """Every entry at once: (keys, values, count) as contiguous buffers of key_size and
        value_stride, read with bpf_map_lookup_batch (a loop of lookups where the map type has
        no batch op). A million entries come back in about a second instead of a minute."""
        if self.use_batch_syscall:
            got = self._dump_batch(chunk)
            if got is not None:
                return got
        keys, values = [], []
        for k, v in self.items():
            keys.append(k)
            values.append(v)
        return b"".join(keys), b"".join(values), len(keys)

    def _dump_batch(self, chunk: int) -> tuple[bytes, bytes, int] | None:
        ks, vs = self.key_size, self.value_stride
        token = max(ks, 8)  # the batch cursor: a bucket index for hashes, a key for arrays
        in_b, out_b = ctypes.create_string_buffer(token), ctypes.create_string_buffer(token)
        kbuf = ctypes.create_string_buffer(chunk * ks)
        vbuf = ctypes.create_string_buffer(chunk * vs)
        opts = _BatchOpts(sz=ctypes.sizeof(_BatchOpts))
        count = c_u32()
        keys, values, total, first = [], [], 0, True
        while True:
            count.value = chunk
            rc = _lookup_batch(
                self.fd,
                None if first else in_b,
                out_b,
                kbuf,
                vbuf,
                ctypes.byref(count),
                ctypes.byref(opts),
            )
            err = _errno() if rc < 0 else 0
            if err and err != errno_mod.ENOENT:
                if first and (err in _NO_BATCH or err == errno_mod.EINVAL):
                    return None
                raise BpfError(err, "bpf_map_lookup_batch", self.name)
            n = count.value
            keys.append(kbuf.raw[: n * ks])
            values.append(vbuf.raw[: n * vs])
            total += n
            if err == errno_mod.ENOENT:
                return b"".join(keys), b"".join(values), total
            ctypes.memmove(in_b, out_b, token)
            first = False

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Iterate over (key, value); entries deleted during iteration are skipped."""
        for k in self.keys():
            v = self.lookup(k)
            if v is not None:
                yield k, v

    def mmap_values(self) -> mmap.mmap:
        """The values of a BPF_F_MMAPABLE array mapped into this process, shared and writable
        (value_size * max_entries bytes, rounded up to whole pages)."""
        size = -(-(self.value_size * self.max_entries) // mmap.PAGESIZE) * mmap.PAGESIZE
        return mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    def pin(self, path: str | Path) -> None:
        """Pin this map at a bpffs path."""
        obj_pin(self.fd, path)

    @staticmethod
    def unpin(path: str | Path) -> None:
        """Remove a pin (the map lives on while other references exist)."""
        os.unlink(path)
