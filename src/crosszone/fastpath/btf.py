"""Read struct layouts and enum values from a compiled BPF object's BTF, through libbpf (ctypes).

Python mirrors of the C structs shared with the fast path are checked against these figures, so
the binary layout is defined once per side and compared automatically (docs/contributing.md,
convention 5).
The walk follows include/uapi/linux/btf.h: a ``struct btf_type`` (name_off, info, size/type)
followed by ``vlen`` kind-specific records (``btf_member``, ``btf_array``, ``btf_enum``...).
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from crosszone.fastpath.libbpf_abi import BpfError, _errno, _fn

c_void_p, c_char_p, c_u32, c_int = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int


class Kind(enum.IntEnum):
    """BTF kinds (BTF_KIND_*)."""

    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


class _BtfType(ctypes.Structure):
    _fields_ = [("name_off", c_u32), ("info", c_u32), ("size_or_type", c_u32)]


class _BtfMember(ctypes.Structure):
    _fields_ = [("name_off", c_u32), ("type", c_u32), ("offset", c_u32)]


class _BtfArray(ctypes.Structure):
    _fields_ = [("type", c_u32), ("index_type", c_u32), ("nelems", c_u32)]


class _BtfEnum(ctypes.Structure):
    _fields_ = [("name_off", c_u32), ("val", ctypes.c_int32)]


class _BtfEnum64(ctypes.Structure):
    _fields_ = [("name_off", c_u32), ("val_lo32", c_u32), ("val_hi32", c_u32)]


_parse_elf = _fn("btf__parse_elf", c_void_p, c_char_p, c_void_p)
_free = _fn("btf__free", None, c_void_p)
_find = _fn("btf__find_by_name_kind", ctypes.c_int32, c_void_p, c_char_p, c_u32)
_type_by_id = _fn("btf__type_by_id", c_void_p, c_void_p, c_u32)
_resolve_size = _fn("btf__resolve_size", ctypes.c_int64, c_void_p, c_u32)
_resolve_type = _fn("btf__resolve_type", c_int, c_void_p, c_u32)
_name_by_offset = _fn("btf__name_by_offset", c_char_p, c_void_p, c_u32)


@dataclass(frozen=True)
class StructLayout:
    """Size of a struct and (offset, size) in bytes of each field.

    Fields of nested structs and unions also appear with dotted names (``inner.port``); members
    of anonymous structs and unions appear under their own names, as C lets code reach them.
    Arrays are one field covering all elements. Bitfields report bit_offset // 8 and their
    width rounded up to whole bytes.
    """

    name: str
    size: int
    fields: dict[str, tuple[int, int]] = field(default_factory=dict)


class _Btf:
    """A parsed BTF blob, freed on exit."""

    def __init__(self, obj_path: str | Path) -> None:
        self.path = str(obj_path)
        self.ptr = _parse_elf(os.fsencode(self.path), None)
        if not self.ptr:
            raise BpfError(_errno(), "btf__parse_elf", self.path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        _free(self.ptr)

    def type(self, type_id: int) -> tuple[_BtfType, int]:
        addr = _type_by_id(self.ptr, type_id)
        if not addr:
            raise BpfError(_errno(), "btf__type_by_id", f"{self.path} type {type_id}")
        return _BtfType.from_address(addr), addr

    def name(self, off: int) -> str:
        return (_name_by_offset(self.ptr, off) or b"").decode()

    def find(self, name: str, *kinds: Kind) -> int:
        for kind in kinds:
            tid = _find(self.ptr, name.encode(), kind)
            if tid > 0:
                return int(tid)
        wanted = "/".join(k.name.lower() for k in kinds)
        raise BpfError(
            errno.ENOENT,
            "btf__find_by_name_kind",
            self.path,
            f"no {wanted} named {name!r}",
            reason="not found",
        )

    def size(self, type_id: int) -> int:
        n = _resolve_size(self.ptr, type_id)
        if n < 0:
            raise BpfError(-n, "btf__resolve_size", f"{self.path} type {type_id}")
        return int(n)

    def resolve(self, type_id: int) -> int:
        """Skip typedefs and modifiers (const, volatile, restrict, type tags)."""
        rid = _resolve_type(self.ptr, type_id)
        if rid < 0:
            raise BpfError(-rid, "btf__resolve_type", f"{self.path} type {type_id}")
        return int(rid)


def _kind(t: _BtfType) -> int:
    return (t.info >> 24) & 0x1F


def _vlen(t: _BtfType) -> int:
    return t.info & 0xFFFF


def _kind_flag(t: _BtfType) -> bool:
    return bool(t.info >> 31)


def _walk(btf: _Btf, type_id: int, base: int, prefix: str, out: dict[str, tuple[int, int]]) -> None:
    t, addr = btf.type(type_id)
    members = (_BtfMember * _vlen(t)).from_address(addr + ctypes.sizeof(_BtfType))
    for m in members:
        if _kind_flag(t):  # bitfield encoding: low 24 bits offset, high 8 bits width
            bit_off, bits = m.offset & 0xFFFFFF, m.offset >> 24
        else:
            bit_off, bits = m.offset, 0
        off = base + bit_off // 8
        size = (bits + 7) // 8 if bits else btf.size(m.type)
        name = btf.name(m.name_off)
        inner = btf.resolve(m.type)
        inner_kind = _kind(btf.type(inner)[0])
        if name:
            out[prefix + name] = (off, size)
        if inner_kind in (Kind.STRUCT, Kind.UNION):
            _walk(btf, inner, off, f"{prefix}{name}." if name else prefix, out)


def struct_layout(obj_path: str | Path, struct_name: str) -> StructLayout:
    """Layout of a struct (or union, or typedef of one) from the object's BTF."""
    with _Btf(obj_path) as btf:
        tid = btf.find(struct_name, Kind.STRUCT, Kind.UNION, Kind.TYPEDEF)
        rid = btf.resolve(tid)
        if _kind(btf.type(rid)[0]) not in (Kind.STRUCT, Kind.UNION):
            raise BpfError(
                errno.EINVAL, "struct_layout", btf.path, f"{struct_name!r} is not a struct"
            )
        fields: dict[str, tuple[int, int]] = {}
        _walk(btf, rid, 0, "", fields)
        return StructLayout(struct_name, btf.size(rid), fields)


def enum_values(obj_path: str | Path, enum_name: str) -> dict[str, int]:
    """Enumerator names and values of an enum (or typedef of one) from the object's BTF."""
    with _Btf(obj_path) as btf:
        tid = btf.resolve(btf.find(enum_name, Kind.ENUM, Kind.ENUM64, Kind.TYPEDEF))
        t, addr = btf.type(tid)
        body = addr + ctypes.sizeof(_BtfType)
        if _kind(t) == Kind.ENUM:
            # 32-bit values: clang 14 predates the kind_flag signedness bit and stores s32, so
            # they are read as signed (C enumerators are ints).
            return {
                btf.name(e.name_off): int(e.val) for e in (_BtfEnum * _vlen(t)).from_address(body)
            }
        if _kind(t) == Kind.ENUM64:
            out = {}
            for e in (_BtfEnum64 * _vlen(t)).from_address(body):
                v = (e.val_hi32 << 32) | e.val_lo32
                if _kind_flag(t) and v >= 1 << 63:
                    v -= 1 << 64
                out[btf.name(e.name_off)] = v
            return out
        raise BpfError(errno.EINVAL, "enum_values", btf.path, f"{enum_name!r} is not an enum")
