"""The Python mirrors of the C structs, enum and constants match the compiled objects."""

from __future__ import annotations

import ctypes
import re

import pytest

from crosszone.abi import layout
from crosszone.abi.objects import BUILD_DIR as BUILD
from crosszone.abi.objects import ROOT
from crosszone.abi.reasons import REASON_MAX, Reason
from crosszone.fastpath import btf

BPF = ROOT / "src" / "crosszone" / "fastpath" / "bpf"
OBJECTS = [BUILD / "xdp_gateway.o", BUILD / "xdp_gateway_lpm.o"]


def _layout(name: str):
    for obj in OBJECTS:
        try:
            return btf.struct_layout(obj, name)
        except (KeyError, LookupError, OSError):
            continue
    pytest.fail(f"struct {name} is in neither object's BTF")


@pytest.mark.parametrize("c_name", sorted(layout.MIRRORS))
def test_mirror_matches_btf(c_name):
    mirror = layout.MIRRORS[c_name]
    got = _layout(c_name)
    assert ctypes.sizeof(mirror) == got.size, c_name
    for field, _ in mirror._fields_:
        desc = getattr(mirror, field)
        assert (desc.offset, desc.size) == got.fields[field], f"{c_name}.{field}"
    assert set(got.fields) == {f for f, _ in mirror._fields_}, c_name


def test_reason_enum_matches_btf():
    values = btf.enum_values(OBJECTS[0], "cz_reason")
    assert values.pop("CZ_R_MAX") == REASON_MAX
    assert values == {r.c_name: int(r) for r in Reason}


def _defines(header: str) -> dict[str, int]:
    out = {}
    for m in re.finditer(
        r"^#define\s+(CZ_\w+)\s+\(?(0x[0-9a-fA-F]+|\d+)(u?l{0,2})\s*(<<\s*(\d+|CZ_\w+))?\)?",
        (BPF / header).read_text(),
        re.MULTILINE,
    ):
        value = int(m.group(2), 0)
        if m.group(5):  # a shift by a number or by a define above it
            shift = m.group(5)
            value <<= out[shift] if shift.startswith("CZ_") else int(shift)
        out[m.group(1)] = value
    return out


@pytest.mark.parametrize("header", ["limits.h", "structs.h"])
def test_constants_match_headers(header):
    defines = _defines(header)
    assert defines, header
    for name, value in defines.items():
        assert getattr(layout, name) == value, name


def test_model_and_bpf_agree_on_sizes_used_by_maps(gateway_object):
    from crosszone.fastpath.libbpf import BpfObject

    with BpfObject.open(gateway_object) as obj:
        pairs = {
            "route4_slots": (ctypes.c_uint32, layout.CzSlot4),
            "route6_slots": (ctypes.c_uint32, layout.CzSlot6),
            "vtep_slots": (ctypes.c_uint32, layout.CzVtepSlot),
            "hosts": (layout.CzHostKey, layout.CzHost),
            "vpcs": (ctypes.c_uint32, layout.CzVpc),
            "vpc_by_vni": (ctypes.c_uint32, ctypes.c_uint32),
            "ecmp_groups": (ctypes.c_uint32, layout.CzGroup),
            "sf4": (layout.CzSf4Key, layout.CzSf),
            "config": (ctypes.c_uint32, layout.CzConfig),
        }
        for name, (k, v) in pairs.items():
            m = obj.map(name)
            assert (m.key_size, m.value_size) == (ctypes.sizeof(k), ctypes.sizeof(v)), name
        assert obj.map("route4_slots").max_entries == layout.CZ_ROUTE4_SLOTS + layout.CZ_SLOT_PROBES
        assert obj.map("route6_slots").max_entries == layout.CZ_ROUTE6_SLOTS + layout.CZ_SLOT_PROBES
        assert obj.map("vtep_slots").max_entries == layout.CZ_VTEP_SLOTS + layout.CZ_SLOT_PROBES
        assert obj.map("reason_stats").max_entries == REASON_MAX
        # double-buffered records (record_table.RECORD_MAPS): two copies per u32 selector
        from crosszone.fastpath.record_table import RECORD_MAPS

        limits = {"config": 1, "ports": layout.CZ_MAX_PORTS, "vpcs": layout.CZ_MAX_VPCS,
                  "ecmp_groups": layout.CZ_MAX_GROUPS, "nexthops": layout.CZ_MAX_NEXTHOPS}
        assert set(RECORD_MAPS) == set(limits)
        for name, n in limits.items():
            sel = obj.map(f"{name}_sel")
            assert (sel.max_entries, sel.value_size) == (n, 4), name
            assert obj.map(name).max_entries == 2 * n, name


def test_encoder_dtypes_match_btf():
    """The encoder's numpy layouts (derived from the mirrors) have the C offsets and sizes."""
    from crosszone.compile import encode as enc

    for c_name, dt in (("cz_host_key", enc.HOST_KEY), ("cz_host", enc.HOST),
                       ("cz_lpm4_key", enc.LPM4_KEY), ("cz_lpm6_key", enc.LPM6_KEY),
                       ("cz_route", enc.ROUTE)):
        got = _layout(c_name)
        assert dt.itemsize == got.size, c_name
        for field in dt.names:
            sub, offset = dt.fields[field][:2]
            assert (offset, sub.itemsize) == got.fields[field], f"{c_name}.{field}"


def test_lpm_route_maps_use_the_mirrors():
    from crosszone.fastpath.libbpf import BpfObject

    with BpfObject.open(BUILD / "xdp_gateway_lpm.o") as obj:
        for name, key in (("routes4_lpm", layout.CzLpm4Key), ("routes6_lpm", layout.CzLpm6Key)):
            m = obj.map(name)
            assert (m.key_size, m.value_size) == (ctypes.sizeof(key), ctypes.sizeof(layout.CzRoute))
