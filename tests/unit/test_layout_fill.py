"""`abi.layout.fill`: bytes into a fixed-size struct field, never past it (issue 12, finding 2)."""

from __future__ import annotations

import ctypes

import pytest

from crosszone.abi import layout


def _vpc_bytes(v: layout.CzVpc) -> bytes:
    return bytes(memoryview(v).cast("B"))


def test_fill_exact_and_shorter_data() -> None:
    v = layout.CzVpc()
    layout.fill(v.plens6, bytes(range(1, 33)))
    assert bytes(v.plens6) == bytes(range(1, 33))
    layout.fill(v.prefix4, b"\x0a\x00")
    assert bytes(v.prefix4) == b"\x0a\x00\x00\x00"


def test_fill_longer_than_the_field_raises_and_writes_nothing() -> None:
    v = layout.CzVpc()
    before = _vpc_bytes(v)
    with pytest.raises(ValueError, match="41 bytes do not fit a 32-byte field"):
        layout.fill(v.plens6, bytes(range(41)))
    # the field, the reserved byte after it and whatever lies past the struct stay untouched
    assert _vpc_bytes(v) == before


def test_fill_one_byte_too_many_raises() -> None:
    v = layout.CzVpc()
    with pytest.raises(ValueError):
        layout.fill(v.sf4, b"\x01" * 5)
    with pytest.raises(ValueError):
        layout.fill(v.plens4, bytes(layout.CZ_MAX_PLENS4 + 1))


def test_fill_does_not_corrupt_a_neighbouring_buffer() -> None:
    # a struct followed in memory by a sentinel: an overlong fill would overwrite the sentinel
    class Guarded(ctypes.Structure):
        _fields_ = [("vpc", layout.CzVpc), ("sentinel", ctypes.c_uint8 * 16)]

    g = Guarded()
    ctypes.memset(g.sentinel, 0xAB, 16)
    with pytest.raises(ValueError):
        layout.fill(g.vpc.plens6, bytes(64))
    assert bytes(g.sentinel) == b"\xab" * 16
