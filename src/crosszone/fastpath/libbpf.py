"""ctypes binding to the distribution's libbpf (Debian libbpf1 1.1, ``libbpf.so.1``).

Why ctypes: there is no maintained Python binding to libbpf. ctypes against the distribution's
libbpf needs no compiler at install time, and every map operation is one ``bpf()`` syscall made
from the calling thread (never a subprocess per map operation, as shelling out to bpftool would be).

Conventions of libbpf 1.x that shape this module: low-level calls return ``-errno`` (and set
errno), constructors return NULL with errno set. Every failure becomes a :class:`BpfError` naming
the libbpf call and the object, map or program concerned. libbpf's own messages are forwarded to
``logging`` at debug level, and the most recent warnings (the verifier log among them) are
appended to the error raised when loading an object fails.

The binding is split in three: libbpf_abi.py (the C declarations), bpf_map.py (maps) and this
module (objects, programs, test runs, XDP attachment), which re-exports the public names.
"""

from __future__ import annotations

import ctypes
import errno as errno_mod
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

from crosszone.fastpath.bpf_map import BpfMap
from crosszone.fastpath.libbpf_abi import (
    BATCH_CHUNK,
    BPF_ANY,
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_F_NO_PREALLOC,
    BPF_F_RDONLY_PROG,
    BPF_F_TEST_RUN_ON_CPU,
    BPF_F_TEST_XDP_LIVE_FRAMES,
    BPF_NOEXIST,
    ENOTSUPP,
    XDP_ABORTED,
    XDP_DROP,
    XDP_FLAGS_DRV_MODE,
    XDP_FLAGS_HW_MODE,
    XDP_FLAGS_REPLACE,
    XDP_FLAGS_SKB_MODE,
    XDP_FLAGS_UPDATE_IF_NOEXIST,
    XDP_PASS,
    XDP_REDIRECT,
    XDP_TX,
    BpfError,
    BpfNotFoundError,
    MapType,
    ProgType,
    _check,
    _errno,
    _fn,
    _info_by_fd,
    _map_fd,
    _map_flags,
    _map_is_internal,
    _map_name,
    _map_set_flags,
    _map_set_pin_path,
    _map_type,
    _next_map,
    _next_prog,
    _obj_close,
    _obj_load,
    _open_file,
    _path,
    _prog_fd,
    _prog_name,
    _prog_section,
    _prog_type,
    _ProgInfo,
    _recent,
    _test_run,
    _TestRunOpts,
    _xdp_attach,
    _xdp_detach,
    _xdp_query,
    _xdp_query_id,
    _XdpAttachOpts,
    _XdpQueryOpts,
    c_char_p,
    c_u32,
    c_void_p,
    obj_get,
    obj_info,
    obj_pin,
    possible_cpus,
)

__all__ = [
    "BATCH_CHUNK",
    "BPF_ANY",
    "BPF_EXIST",
    "BPF_F_LOCK",
    "BPF_F_NO_PREALLOC",
    "BPF_F_RDONLY_PROG",
    "BPF_F_TEST_RUN_ON_CPU",
    "BPF_F_TEST_XDP_LIVE_FRAMES",
    "BPF_NOEXIST",
    "ENOTSUPP",
    "XDP_ABORTED",
    "XDP_DROP",
    "XDP_FLAGS_DRV_MODE",
    "XDP_FLAGS_HW_MODE",
    "XDP_FLAGS_REPLACE",
    "XDP_FLAGS_SKB_MODE",
    "XDP_FLAGS_UPDATE_IF_NOEXIST",
    "XDP_PASS",
    "XDP_REDIRECT",
    "XDP_TX",
    "BpfError",
    "BpfMap",
    "BpfNotFoundError",
    "BpfObject",
    "BpfProgram",
    "MapSpec",
    "MapType",
    "ProgType",
    "TestRunResult",
    "map_specs",
    "obj_get",
    "obj_pin",
    "possible_cpus",
    "xdp_attach",
    "xdp_ctx",
    "xdp_detach",
    "xdp_query",
    "xdp_query_prog_id",
]


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
        return int(obj_info(self.fd, _ProgInfo(), self.name).id)  # type: ignore[attr-defined]

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


@dataclass(frozen=True)
class MapSpec:
    """A map as an object file defines it (type, sizes, entries, flags), before any load."""

    name: str
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int


_map_key_size = _fn("bpf_map__key_size", ctypes.c_uint32, ctypes.c_void_p)
_map_value_size = _fn("bpf_map__value_size", ctypes.c_uint32, ctypes.c_void_p)
_map_max_entries = _fn("bpf_map__max_entries", ctypes.c_uint32, ctypes.c_void_p)


def map_specs(path: str | Path) -> dict[str, MapSpec]:
    """The maps an object defines, read by bpf_object__open_file without loading it (no
    privilege needed): what `testing.fake_maps` builds its stand-ins from."""
    ptr = _open_file(_path(path), None)
    if not ptr:
        raise BpfError(_errno(), "bpf_object__open_file", str(path))
    try:
        out = {}
        m = _next_map(ptr, None)
        while m:
            if not _map_is_internal(m):
                name = _map_name(m).decode()
                out[name] = MapSpec(name, _map_type(m), _map_key_size(m), _map_value_size(m),
                                    _map_max_entries(m), _map_flags(m))
            m = _next_map(ptr, m)
        return out
    finally:
        _obj_close(ptr)


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


def xdp_query(ifindex: int) -> tuple[int, int]:
    """(native-mode, generic-mode) ids of the XDP programs on an interface (0: none)."""
    o = _XdpQueryOpts(sz=ctypes.sizeof(_XdpQueryOpts))
    _check(_xdp_query(ifindex, 0, ctypes.byref(o)), "bpf_xdp_query", f"ifindex {ifindex}")
    return int(o.drv_prog_id), int(o.skb_prog_id)


def xdp_query_prog_id(ifindex: int, flags: int = 0) -> int:
    """Id of the XDP program attached (flags=0: any single mode, else that mode); 0 if none."""
    pid = c_u32()
    _check(
        _xdp_query_id(ifindex, flags, ctypes.byref(pid)), "bpf_xdp_query_id", f"ifindex {ifindex}"
    )
    return int(pid.value)
