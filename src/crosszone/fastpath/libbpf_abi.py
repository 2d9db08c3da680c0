"""libbpf's C ABI for the binding in crosszone.fastpath.libbpf: the loaded libbpf.so.1, the
functions and option structs it uses, kernel constants, the error type, and libbpf's log
forwarded to `logging` (its recent lines are kept for the error of a failed load)."""

from __future__ import annotations

import ctypes
import enum
import errno as errno_mod
import logging
import os
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
# a kernel may refuse it (EINVAL before 5.18, EPERM under a BPF LSM): callers ask
# fastpath/live_frames.probe() first and report the refusal instead of depending on it
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
_lookup_batch = _fn(
    "bpf_map_lookup_batch",
    c_int,
    c_int,
    c_void_p,
    c_void_p,
    c_void_p,
    c_void_p,
    ctypes.POINTER(c_u32),
    c_void_p,
)
_obj_get = _fn("bpf_obj_get", c_int, c_char_p)
_obj_pin = _fn("bpf_obj_pin", c_int, c_int, c_char_p)
_info_by_fd = _fn("bpf_obj_get_info_by_fd", c_int, c_int, c_void_p, ctypes.POINTER(c_u32))
_test_run = _fn("bpf_prog_test_run_opts", c_int, c_int, c_void_p)
_xdp_attach = _fn("bpf_xdp_attach", c_int, c_int, c_int, c_u32, c_void_p)
_xdp_detach = _fn("bpf_xdp_detach", c_int, c_int, c_u32, c_void_p)
_xdp_query = _fn("bpf_xdp_query", c_int, c_int, c_int, c_void_p)
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


class _XdpQueryOpts(ctypes.Structure):
    # struct bpf_xdp_query_opts, libbpf 1.1 (/usr/include/bpf/libbpf.h)
    _fields_ = [("sz", c_size_t), ("prog_id", c_u32), ("drv_prog_id", c_u32),
                ("hw_prog_id", c_u32), ("skb_prog_id", c_u32), ("attach_mode", ctypes.c_uint8)]


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


def obj_info(fd: int, info: ctypes.Structure, target: str) -> ctypes.Structure:
    """Fill a bpf_*_info struct for fd (bpf_obj_get_info_by_fd) and return it."""
    size = c_u32(ctypes.sizeof(info))
    _check(
        _info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)), "bpf_obj_get_info_by_fd", target
    )
    return info


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
