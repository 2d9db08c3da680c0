"""ctypes binding to the distribution's libbpf (Debian libbpf1 1.1, ``libbpf.so.1``).

Why ctypes: there is no maintained Python binding to libbpf. ctypes against the distribution's
libbpf needs no compiler at install time, and every map operation is one ``bpf()`` syscall made
from the calling thread (never a subprocess per map operation, as shelling out to bpftool would be).

Conventions of libbpf 1.x that shape this module: low-level calls return ``-errno`` (and set
errno), constructors return NULL with errno set. Every failure becomes a :class:`BpfError` naming
the libbpf call and the object, map or program concerned. libbpf's own messages are forwarded to
``logging`` at debug level, and the most recent warnings (the verifier log among them) are
appended to the error raised when loading an object fails.
"""

from __future__ import annotations

import ctypes
import enum
import errno as errno_mod
import logging
import os
import struct
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

log = logging.getLogger(__name__)

_lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
_libc = ctypes.CDLL(None, use_errno=True)

c_int, c_u32, c_u64 = ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64
c_void_p, c_char_p, c_size_t = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t


def _fn(name: str, restype: Any, *argtypes: Any) -> Any:
    f = getattr(_lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


# Kernel constants (include/uapi/linux/bpf.h, if_link.h).
BPF_ANY, BPF_NOEXIST, BPF_EXIST, BPF_F_LOCK = 0, 1, 2, 4
BPF_F_NO_PREALLOC = 1
BPF_F_RDONLY_PROG = 1 << 7
BPF_F_TEST_RUN_ON_CPU = 1 << 0
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
XDP_FLAGS_UPDATE_IF_NOEXIST = 1 << 0
XDP_FLAGS_SKB_MODE = 1 << 1
XDP_FLAGS_DRV_MODE = 1 << 2
XDP_FLAGS_HW_MODE = 1 << 3
XDP_FLAGS_REPLACE = 1 << 4
ENOTSUPP = 524  # kernel-internal errno returned for map types without batch ops
BATCH_CHUNK = 65536


class MapType(enum.IntEnum):
    """The map types this project uses (enum bpf_map_type)."""

    UNSPEC = 0
    HASH = 1
    ARRAY = 2
    PROG_ARRAY = 3
    PERF_EVENT_ARRAY = 4
    PERCPU_HASH = 5
    PERCPU_ARRAY = 6
    LRU_HASH = 9
    LRU_PERCPU_HASH = 10
    LPM_TRIE = 11
    ARRAY_OF_MAPS = 12
    HASH_OF_MAPS = 13
    DEVMAP = 14
    CPUMAP = 16
    XSKMAP = 17
    PERCPU_CGROUP_STORAGE = 21
    DEVMAP_HASH = 25
    RINGBUF = 27


class ProgType(enum.IntEnum):
    """The program types this project uses (enum bpf_prog_type)."""

    UNSPEC = 0
    SOCKET_FILTER = 1
    SCHED_CLS = 3
    SCHED_ACT = 4
    XDP = 6


XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX, XDP_REDIRECT = range(5)
_PERCPU_TYPES = frozenset({5, 6, 10, 21})
_NO_BATCH = (ENOTSUPP, errno_mod.EOPNOTSUPP)


class BpfError(OSError):
    """A libbpf call failed: carries ``errno``, the ``call`` and the ``target`` it concerned."""

    def __init__(
        self, err: int, call: str, target: str = "", detail: str = "", reason: str = ""
    ) -> None:
        err = abs(err) if err else errno_mod.EIO
        if not reason:
            reason = (
                "not supported for this map/program type" if err == ENOTSUPP else os.strerror(err)
            )
        msg = f"{call}({target}): {reason}" + (f": {detail}" if detail else "")
        super().__init__(err, msg)
        self.call = call
        self.target = target


class BpfNotFoundError(BpfError, KeyError):
    """A map or program name is not in the object (also a KeyError)."""


def _check(rc: int, call: str, target: str = "") -> int:
    if rc < 0:
        raise BpfError(-rc, call, target)
    return rc


# --- libbpf print callback: forward to logging, remember recent warnings for load errors. ---
_PRINT_FN = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
_vsnprintf = _libc.vsnprintf
_vsnprintf.restype = c_int
_vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]
_recent: deque[str] = deque(maxlen=400)


def _print_cb(level: int, fmt: bytes, va: int) -> int:
    # On x86_64 a va_list argument is a pointer to __va_list_tag, so libc can format it.
    if level == 2 and not log.isEnabledFor(logging.DEBUG):
        return 0
    buf = ctypes.create_string_buffer(4096)
    _vsnprintf(buf, len(buf), fmt, va)
    text = buf.value.decode(errors="replace").rstrip("\n")
    if level < 2:
        _recent.append(text)
    log.debug("libbpf: %s", text)
    return 0


_print_ref = _PRINT_FN(_print_cb)  # keep a reference: libbpf holds the raw pointer
_fn("libbpf_set_print", c_void_p, _PRINT_FN)(_print_ref)

# --- libbpf function prototypes ---
_open_file = _fn("bpf_object__open_file", c_void_p, c_char_p, c_void_p)
_obj_load = _fn("bpf_object__load", c_int, c_void_p)
_obj_close = _fn("bpf_object__close", None, c_void_p)
_next_map = _fn("bpf_object__next_map", c_void_p, c_void_p, c_void_p)
_next_prog = _fn("bpf_object__next_program", c_void_p, c_void_p, c_void_p)
_map_name = _fn("bpf_map__name", c_char_p, c_void_p)
_map_fd = _fn("bpf_map__fd", c_int, c_void_p)
_map_is_internal = _fn("bpf_map__is_internal", ctypes.c_bool, c_void_p)
_map_set_pin_path = _fn("bpf_map__set_pin_path", c_int, c_void_p, c_char_p)
_map_type = _fn("bpf_map__type", c_int, c_void_p)
_map_flags = _fn("bpf_map__map_flags", c_u32, c_void_p)
_map_set_flags = _fn("bpf_map__set_map_flags", c_int, c_void_p, c_u32)
_prog_name = _fn("bpf_program__name", c_char_p, c_void_p)
_prog_fd = _fn("bpf_program__fd", c_int, c_void_p)
_prog_section = _fn("bpf_program__section_name", c_char_p, c_void_p)
_prog_type = _fn("bpf_program__type", c_int, c_void_p)
_map_create = _fn("bpf_map_create", c_int, c_int, c_char_p, c_u32, c_u32, c_u32, c_void_p)
_update_elem = _fn("bpf_map_update_elem", c_int, c_int, c_void_p, c_void_p, c_u64)
_lookup_elem = _fn("bpf_map_lookup_elem", c_int, c_int, c_void_p, c_void_p)
_delete_elem = _fn("bpf_map_delete_elem", c_int, c_int, c_void_p)
_next_key = _fn("bpf_map_get_next_key", c_int, c_int, c_void_p, c_void_p)
_update_batch = _fn(
    "bpf_map_update_batch", c_int, c_int, c_void_p, c_void_p, ctypes.POINTER(c_u32), c_void_p
)
_delete_batch = _fn("bpf_map_delete_batch", c_int, c_int, c_void_p, ctypes.POINTER(c_u32), c_void_p)
_obj_get = _fn("bpf_obj_get", c_int, c_char_p)
_obj_pin = _fn("bpf_obj_pin", c_int, c_int, c_char_p)
_info_by_fd = _fn("bpf_obj_get_info_by_fd", c_int, c_int, c_void_p, ctypes.POINTER(c_u32))
_test_run = _fn("bpf_prog_test_run_opts", c_int, c_int, c_void_p)
_xdp_attach = _fn("bpf_xdp_attach", c_int, c_int, c_int, c_u32, c_void_p)
_xdp_detach = _fn("bpf_xdp_detach", c_int, c_int, c_u32, c_void_p)
_xdp_query_id = _fn("bpf_xdp_query_id", c_int, c_int, c_int, ctypes.POINTER(c_u32))
_num_cpus = _fn("libbpf_num_possible_cpus", c_int)


class _BatchOpts(ctypes.Structure):
    _fields_ = [("sz", c_size_t), ("elem_flags", c_u64), ("flags", c_u64)]


class _MapCreateOpts(ctypes.Structure):
    _fields_ = [
        ("sz", c_size_t),
        ("btf_fd", c_u32),
        ("btf_key_type_id", c_u32),
        ("btf_value_type_id", c_u32),
        ("btf_vmlinux_value_type_id", c_u32),
        ("inner_map_fd", c_u32),
        ("map_flags", c_u32),
        ("map_extra", c_u64),
        ("numa_node", c_u32),
        ("map_ifindex", c_u32),
    ]


class _TestRunOpts(ctypes.Structure):
    # struct bpf_test_run_opts, libbpf 1.1 (/usr/include/bpf/bpf.h); natural alignment matches C.
    _fields_ = [
        ("sz", c_size_t),
        ("data_in", c_void_p),
        ("data_out", c_void_p),
        ("data_size_in", c_u32),
        ("data_size_out", c_u32),
        ("ctx_in", c_void_p),
        ("ctx_out", c_void_p),
        ("ctx_size_in", c_u32),
        ("ctx_size_out", c_u32),
        ("retval", c_u32),
        ("repeat", c_int),
        ("duration", c_u32),
        ("flags", c_u32),
        ("cpu", c_u32),
        ("batch_size", c_u32),
    ]


class _XdpAttachOpts(ctypes.Structure):
    _fields_ = [("sz", c_size_t), ("old_prog_fd", c_int)]


class _MapInfo(ctypes.Structure):
    # Head of struct bpf_map_info; the kernel copies min(our size, its size).
    _fields_ = [
        ("type", c_u32),
        ("id", c_u32),
        ("key_size", c_u32),
        ("value_size", c_u32),
        ("max_entries", c_u32),
        ("map_flags", c_u32),
        ("name", ctypes.c_char * 16),
    ]


class _ProgInfo(ctypes.Structure):
    # Head of struct bpf_prog_info.
    _fields_ = [("type", c_u32), ("id", c_u32), ("tag", ctypes.c_uint8 * 8)]


def _errno() -> int:
    return ctypes.get_errno() or errno_mod.EIO


def _path(p: str | Path) -> bytes:
    return os.fsencode(str(p))


def possible_cpus() -> int:
    """Number of possible CPUs, the per-CPU map stride count (libbpf_num_possible_cpus)."""
    return _check(_num_cpus(), "libbpf_num_possible_cpus")


def obj_get(path: str | Path) -> int:
    """Open a pinned BPF object (map, program, link) and return a new fd (bpf_obj_get)."""
    return _check(_obj_get(_path(path)), "bpf_obj_get", str(path))


def obj_pin(fd: int, path: str | Path) -> None:
    """Pin a BPF object fd at a bpffs path (bpf_obj_pin)."""
    _check(_obj_pin(fd, _path(path)), "bpf_obj_pin", str(path))


def _round8(n: int) -> int:
    return (n + 7) & ~7


def _as_buffer(data: bytes | Sequence[bytes], item: int, what: str, target: str) -> bytes:
    """Concatenate a sequence of fixed-size items (or check an already concatenated blob)."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        blob = bytes(data)
    else:
        sizes = set(map(len, data))
        if sizes - {item}:
            bad = next(i for i, d in enumerate(data) if len(d) != item)
            raise BpfError(
                errno_mod.EINVAL,
                "update_batch",
                target,
                f"{what} #{bad} is {len(data[bad])} bytes, expected {item}",
            )
        blob = b"".join(data)
    if len(blob) % item:
        raise BpfError(
            errno_mod.EINVAL,
            "update_batch",
            target,
            f"{what} buffer of {len(blob)} bytes is not a multiple of {item}",
        )
    return blob


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
        info = _MapInfo()
        size = c_u32(ctypes.sizeof(info))
        _check(
            _info_by_fd(self.fd, ctypes.byref(info), ctypes.byref(size)),
            "bpf_obj_get_info_by_fd",
            self.name,
        )
        return int(info.id)

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
        """Create or update one entry (bpf_map_update_elem); per-CPU maps take value_stride bytes."""
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

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Iterate over (key, value); entries deleted during iteration are skipped."""
        for k in self.keys():
            v = self.lookup(k)
            if v is not None:
                yield k, v

    def pin(self, path: str | Path) -> None:
        """Pin this map at a bpffs path."""
        obj_pin(self.fd, path)

    @staticmethod
    def unpin(path: str | Path) -> None:
        """Remove a pin (the map lives on while other references exist)."""
        os.unlink(path)


@dataclass(frozen=True)
class TestRunResult:
    """What BPF_PROG_TEST_RUN reported."""

    retval: int
    data_out: bytes
    ctx_out: bytes
    duration_ns: int  # per-iteration average, as the kernel reports it

    __test__ = False  # not a pytest class


def xdp_ctx(ingress_ifindex: int = 0, rx_queue_index: int = 0, data_len: int = 0) -> bytes:
    """Pack struct xdp_md for ctx_in; data_len=0 lets test_run fill in the frame length."""
    # Kernel rules (net/bpf/test_run.c): data_meta must be 0, data is the metadata length (0
    # here), data_end may not pass the frame (6.18 accepted smaller values; a larger one is
    # EINVAL), egress_ifindex must be 0, ingress_ifindex must exist in the caller's netns and
    # rx_queue_index must be below its real_num_rx_queues. Live-frames mode also refuses
    # data_out/ctx_out buffers and frames larger than a page.
    return struct.pack("<6I", 0, data_len, 0, ingress_ifindex, rx_queue_index, 0)


class BpfProgram:
    """A loaded BPF program of a BpfObject (or opened from a pin)."""

    def __init__(
        self, name: str, fd: int, prog_type: int, section: str = "", *, owns_fd: bool = False
    ) -> None:
        self.name = name
        self.fd = fd
        self.prog_type = (
            ProgType(prog_type) if prog_type in ProgType._value2member_map_ else prog_type
        )
        self.section = section
        self._owns_fd = owns_fd

    def __repr__(self) -> str:
        return f"BpfProgram({self.name!r}, fd={self.fd}, section={self.section!r})"

    @classmethod
    def from_pinned(cls, path: str | Path) -> BpfProgram:
        """Open a pinned program; the returned program owns its fd."""
        fd = obj_get(path)
        info = _ProgInfo()
        size = c_u32(ctypes.sizeof(info))
        if _info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) < 0:
            err = _errno()
            os.close(fd)
            raise BpfError(err, "bpf_obj_get_info_by_fd", str(path))
        return cls(Path(path).name, fd, info.type, owns_fd=True)

    @property
    def id(self) -> int:
        """Kernel program id (what xdp_query_prog_id reports)."""
        info = _ProgInfo()
        size = c_u32(ctypes.sizeof(info))
        _check(
            _info_by_fd(self.fd, ctypes.byref(info), ctypes.byref(size)),
            "bpf_obj_get_info_by_fd",
            self.name,
        )
        return int(info.id)

    def close(self) -> None:
        """Close the fd if this program owns it."""
        if self._owns_fd and self.fd >= 0:
            os.close(self.fd)
        self.fd = -1

    def pin(self, path: str | Path) -> None:
        """Pin this program at a bpffs path."""
        obj_pin(self.fd, path)

    def test_run(
        self,
        data: bytes,
        *,
        ctx: bytes | None = None,
        repeat: int = 1,
        flags: int = 0,
        batch_size: int = 0,
        data_out_size: int | None = None,
        cpu: int = 0,
    ) -> TestRunResult:
        """Run the program on data with BPF_PROG_TEST_RUN (bpf_prog_test_run_opts)."""
        live = bool(flags & BPF_F_TEST_XDP_LIVE_FRAMES)
        xdp = ctx is not None and self.prog_type == ProgType.XDP and len(ctx) >= 8
        if xdp and ctx is not None and int.from_bytes(ctx[4:8], "little") == 0:
            ctx = ctx[:4] + len(data).to_bytes(4, "little") + ctx[8:]  # xdp_ctx(data_len=0)
        opts = _TestRunOpts(sz=ctypes.sizeof(_TestRunOpts))
        din = bytes(data)
        opts.data_in = ctypes.cast(c_char_p(din), c_void_p)
        opts.data_size_in = len(din)
        # The kernel refuses data_out/ctx_out in live-frames mode. Otherwise leave room for a
        # jumbo frame plus growth by bpf_xdp_adjust_head/tail.
        out = ctx_out = None
        if not live:
            size = data_out_size if data_out_size is not None else max(len(din), 9216) + 512
            out = ctypes.create_string_buffer(size)
            opts.data_out = ctypes.cast(out, c_void_p)
            opts.data_size_out = size
        if ctx is not None:
            cin = bytes(ctx)
            opts.ctx_in = ctypes.cast(c_char_p(cin), c_void_p)
            opts.ctx_size_in = len(cin)
            if not live:
                ctx_out = ctypes.create_string_buffer(max(len(cin), 256))
                opts.ctx_out = ctypes.cast(ctx_out, c_void_p)
                opts.ctx_size_out = len(ctx_out)
        opts.repeat = repeat
        opts.flags = flags
        opts.batch_size = batch_size
        opts.cpu = cpu
        if _test_run(self.fd, ctypes.byref(opts)) < 0:
            err = _errno()
            hint = "data_out too small: raise data_out_size" if err == errno_mod.ENOSPC else ""
            raise BpfError(err, "bpf_prog_test_run_opts", self.name, hint)
        return TestRunResult(
            retval=int(opts.retval),
            data_out=out.raw[: opts.data_size_out] if out is not None else b"",
            ctx_out=ctx_out.raw[: opts.ctx_size_out] if ctx_out is not None else b"",
            duration_ns=int(opts.duration),
        )


class BpfObject:
    """A compiled BPF object file, opened and loaded by libbpf."""

    def __init__(self, ptr: int, path: str) -> None:
        self._ptr: int | None = ptr
        self.path = path
        self.maps: dict[str, BpfMap] = {}
        self.programs: dict[str, BpfProgram] = {}
        m: int | None = _next_map(ptr, None)
        while m:
            name = _map_name(m).decode()
            self.maps[name] = BpfMap._from_fd(_map_fd(m), name, False, name)
            m = _next_map(ptr, m)
        p: int | None = _next_prog(ptr, None)
        while p:
            name = _prog_name(p).decode()
            self.programs[name] = BpfProgram(
                name, _prog_fd(p), _prog_type(p), (_prog_section(p) or b"").decode()
            )
            p = _next_prog(ptr, p)

    @classmethod
    def open(cls, path: str | Path, pin_maps_dir: str | Path | None = None) -> BpfObject:
        """Open and load an object; with pin_maps_dir, reuse or create pins <dir>/<map name>."""
        spath = str(path)
        ptr = _open_file(_path(path), None)
        if not ptr:
            raise BpfError(_errno(), "bpf_object__open_file", spath)
        try:
            if pin_maps_dir is not None:
                Path(pin_maps_dir).mkdir(parents=True, exist_ok=True)
                m = _next_map(ptr, None)
                while m:
                    # Internal maps (.rodata, .bss) are per-object state, never shared by pins.
                    if not _map_is_internal(m):
                        name = _map_name(m).decode()
                        pin = _path(Path(pin_maps_dir) / name)
                        _check(_map_set_pin_path(m, pin), "bpf_map__set_pin_path", name)
                        # The kernel adds BPF_F_RDONLY_PROG to every devmap it creates (and
                        # refuses it from user space); libbpf 1.1 compares flags before reusing
                        # a pin, so mirror the kernel's flags only when a pin is there.
                        devmap = _map_type(m) in (MapType.DEVMAP, MapType.DEVMAP_HASH)
                        if devmap and os.path.exists(pin):
                            flags = _map_flags(m) | BPF_F_RDONLY_PROG
                            _check(_map_set_flags(m, flags), "bpf_map__set_map_flags", name)
                    m = _next_map(ptr, m)
            _recent.clear()
            rc = _obj_load(ptr)
            if rc < 0:
                tail = "\n".join(list(_recent)[-40:])
                raise BpfError(
                    -rc, "bpf_object__load", spath, ("libbpf said:\n" + tail) if tail else ""
                )
            return cls(ptr, spath)
        except BaseException:
            _obj_close(ptr)
            raise

    def map(self, name: str) -> BpfMap:
        """The map called name; BpfNotFoundError (a KeyError) lists the names that exist."""
        try:
            return self.maps[name]
        except KeyError:
            raise BpfNotFoundError(
                errno_mod.ENOENT,
                "map",
                name,
                f"{self.path} has maps {sorted(self.maps)}",
                reason="no such map",
            ) from None

    def program(self, name: str) -> BpfProgram:
        """The program called name (its C function name)."""
        try:
            return self.programs[name]
        except KeyError:
            raise BpfNotFoundError(
                errno_mod.ENOENT,
                "program",
                name,
                f"{self.path} has programs {sorted(self.programs)}",
                reason="no such program",
            ) from None

    def close(self) -> None:
        """Unload the object: its programs and unpinned maps go away when no longer referenced."""
        if self._ptr:
            _obj_close(self._ptr)
            self._ptr = None
            for m in self.maps.values():
                m.fd = -1
            for p in self.programs.values():
                p.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_ptr", None) and _obj_close is not None:  # may run at shutdown
            self.close()


def xdp_attach(
    ifindex: int, prog_fd: int, flags: int = XDP_FLAGS_DRV_MODE, old_prog_fd: int | None = None
) -> None:
    """Attach an XDP program; with old_prog_fd, replace exactly that program atomically."""
    opts = None
    if old_prog_fd is not None:
        flags |= XDP_FLAGS_REPLACE
        o = _XdpAttachOpts(sz=ctypes.sizeof(_XdpAttachOpts), old_prog_fd=old_prog_fd)
        opts = ctypes.byref(o)
    _check(_xdp_attach(ifindex, prog_fd, flags, opts), "bpf_xdp_attach", f"ifindex {ifindex}")


def xdp_detach(ifindex: int, flags: int = XDP_FLAGS_DRV_MODE) -> None:
    """Detach the XDP program of that mode from an interface."""
    _check(_xdp_detach(ifindex, flags, None), "bpf_xdp_detach", f"ifindex {ifindex}")


def xdp_query_prog_id(ifindex: int, flags: int = 0) -> int:
    """Id of the XDP program attached (flags=0: any single mode, else that mode); 0 if none."""
    pid = c_u32()
    _check(
        _xdp_query_id(ifindex, flags, ctypes.byref(pid)), "bpf_xdp_query_id", f"ifindex {ifindex}"
    )
    return int(pid.value)
