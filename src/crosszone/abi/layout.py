"""Python mirrors of the structs in `bpf/structs.h` and the constants in `bpf/limits.h`.

Each class quotes its C definition. `tests/fastpath/test_layout.py` compares every size and field
offset with the BTF of the compiled object, and every constant with the header, so a change on one
side without the other fails the tests. Addresses and ports are network byte order on both sides
(`c_uint8 * N` or big-endian integers); everything else is host order.

Key fields that the encoder fills from integer arrays (route and VTEP addresses, the LPM keys'
VPC id) are big-endian integer types (`BE32`, `BE64 * 2`), so `numpy.dtype(mirror)` is the
encoder's record layout as it is: no layout is declared a second time (compile/encode.py).
"""

from __future__ import annotations

import ctypes
from ctypes import c_uint8, c_uint16, c_uint32, c_uint64

# bpf/limits.h
CZ_MAX_VPCS = 4096
CZ_MAX_ROUTES4 = 2097152
CZ_MAX_ROUTES6 = 1048576
CZ_MAX_HOSTS = 1048576
CZ_MAX_VTEPS = 1048576
CZ_MAX_SF = 8192
CZ_MAX_GROUPS = 4096
CZ_MAX_NEXTHOPS = 4096
CZ_MAX_PORTS = 64
CZ_ECMP_BUCKETS = 256
CZ_MAX_PLENS4 = 33
CZ_MAX_PLENS6 = 32
CZ_ROUTE4_SLOT_BITS = 23
CZ_ROUTE4_SLOTS = 1 << CZ_ROUTE4_SLOT_BITS
CZ_ROUTE6_SLOT_BITS = 22
CZ_ROUTE6_SLOTS = 1 << CZ_ROUTE6_SLOT_BITS
CZ_VTEP_SLOT_BITS = 22
CZ_VTEP_SLOTS = 1 << CZ_VTEP_SLOT_BITS
CZ_SLOT_PROBES = 64
CZ_FLOW_SLOT_BITS = 17
CZ_FLOW_SLOTS = 1 << CZ_FLOW_SLOT_BITS
CZ_FLOWLET_MIX = 0x9E3779B1
CZ_VXLAN_PORT = 4789
CZ_OUTER_TTL = 64
CZ_SPORT_BASE = 49152
CZ_SPORT_MASK = 0x3FFF

# bpf/structs.h flags and actions
CZ_CFG_TRACE = 1 << 0
CZ_CFG_POLICY = 1 << 1
CZ_CFG_RATES = 1 << 2
CZ_VPC_HAS4 = 1 << 0
CZ_VPC_HAS6 = 1 << 1
CZ_VPC_XLAT4 = 1 << 2
CZ_VPC_XLAT6 = 1 << 3
CZ_ACT_FORWARD = 1
CZ_ACT_BLACKHOLE = 2
CZ_ACT_SLOWPATH = 3
CZ_NO_PORT = 0xFFFFFFFF
CZ_NO_VPC = 0xFFFFFFFF
CZ_SLOT_EMPTY = 0
CZ_SLOT_DELETED = 1
CZ_SLOT_LIVE = 1 << 63
CZ_SLOT_VPC_SHIFT = 40
CZ_SLOT_PLEN_SHIFT = 32
CZ_SLOT_VNI_SHIFT = 32

MAC = c_uint8 * 6
IP6 = c_uint8 * 16
#: Network-order integers: __be32, and an IPv6 address as two big-endian halves (hi, lo).
BE32 = c_uint32.__ctype_be__
BE64 = c_uint64.__ctype_be__
IP6_HALVES = BE64 * 2


class CzConfig(ctypes.Structure):
    """struct cz_config { __be32 vtep; __u32 flags; __u32 compute_port; __u8 small_dscp;
    __u8 bulk_dscp; __u16 reserved; __u64 elephant_bytes; __u64 flowlet_gap_ticks;
    __u64 flow_idle_ticks; };"""

    _fields_ = [
        ("vtep", c_uint8 * 4),
        ("flags", c_uint32),
        ("compute_port", c_uint32),
        ("small_dscp", c_uint8),
        ("bulk_dscp", c_uint8),
        ("reserved", c_uint16),
        ("elephant_bytes", c_uint64),
        ("flowlet_gap_ticks", c_uint64),
        ("flow_idle_ticks", c_uint64),
    ]


class CzPort(ctypes.Structure):
    """struct cz_port { __u32 ifindex; __u8 mac[6]; __u8 next_hop_mac[6]; };"""

    _fields_ = [("ifindex", c_uint32), ("mac", MAC), ("next_hop_mac", MAC)]


class CzVpc(ctypes.Structure):
    """struct cz_vpc { __u32 vpc_id, flags; __be32 prefix4, mask4, sf4; __u8 prefix6[16], mask6[16],
    sf6[16]; __u8 n_plens4, n_plens6; __u8 plens4[33]; __u8 plens6[32]; __u8 reserved;
    __u64 rate_ns_per_mib; __u64 burst_ns; };"""

    _fields_ = [
        ("vpc_id", c_uint32),
        ("flags", c_uint32),
        ("prefix4", c_uint8 * 4),
        ("mask4", c_uint8 * 4),
        ("sf4", c_uint8 * 4),
        ("prefix6", IP6),
        ("mask6", IP6),
        ("sf6", IP6),
        ("n_plens4", c_uint8),
        ("n_plens6", c_uint8),
        ("plens4", c_uint8 * CZ_MAX_PLENS4),
        ("plens6", c_uint8 * CZ_MAX_PLENS6),
        ("reserved", c_uint8),
        ("rate_ns_per_mib", c_uint64),
        ("burst_ns", c_uint64),
    ]


# The control plane's keys of the slot tables (no C struct: slot_table.py packs them into the key
# words of struct cz_slot4 / cz_slot6 / cz_vtep_slot, and the fast-path tests prove the packing).
class CzVtepKey(ctypes.Structure):
    """(VNI, outer source VTEP): the key of vtep_allowed."""

    _fields_ = [("vni", c_uint32), ("vtep", BE32)]


class CzRoute4Key(ctypes.Structure):
    """(VPC id, prefix length, masked IPv4 dst): the key of routes4."""

    _fields_ = [("vpc_id", c_uint32), ("plen", c_uint32), ("addr", BE32)]


class CzRoute6Key(ctypes.Structure):
    """(VPC id, prefix length, masked IPv6 dst): the key of routes6."""

    _fields_ = [("vpc_id", c_uint32), ("plen", c_uint32), ("addr", IP6_HALVES)]


class CzLpm4Key(ctypes.Structure):
    """struct cz_lpm4_key { __u32 prefixlen; __be32 vpc_id; __be32 addr; };"""

    _fields_ = [("prefixlen", c_uint32), ("vpc_id", BE32), ("addr", BE32)]


class CzLpm6Key(ctypes.Structure):
    """struct cz_lpm6_key { __u32 prefixlen; __be32 vpc_id; __u8 addr[16]; };"""

    _fields_ = [("prefixlen", c_uint32), ("vpc_id", BE32), ("addr", IP6_HALVES)]


class CzRoute(ctypes.Structure):
    """struct cz_route { __u32 action; __u32 group; };"""

    _fields_ = [("action", c_uint32), ("group", c_uint32)]


class CzSlot4(ctypes.Structure):
    """struct cz_slot4 { __u64 key; __u64 value; };"""

    _fields_ = [("key", ctypes.c_uint64), ("value", ctypes.c_uint64)]


class CzSlot6(ctypes.Structure):
    """struct cz_slot6 { __u64 key; __u64 hi; __u64 lo; __u64 value; };"""

    _fields_ = [("key", ctypes.c_uint64), ("hi", ctypes.c_uint64), ("lo", ctypes.c_uint64),
                ("value", ctypes.c_uint64)]


class CzVtepSlot(ctypes.Structure):
    """struct cz_vtep_slot { __u64 key; __u32 vpc_id; __u32 reserved; };"""

    _fields_ = [("key", ctypes.c_uint64), ("vpc_id", c_uint32), ("reserved", c_uint32)]


class CzGroup(ctypes.Structure):
    """struct cz_group { __u32 n_members; __u32 reserved; __u16 buckets[CZ_ECMP_BUCKETS]; };"""

    _fields_ = [
        ("n_members", c_uint32),
        ("reserved", c_uint32),
        ("buckets", c_uint16 * CZ_ECMP_BUCKETS),
    ]


class CzNexthop(ctypes.Structure):
    """struct cz_nexthop { __u32 port; __u32 ifindex; __u8 mac[6]; __u8 smac[6]; };"""

    _fields_ = [("port", c_uint32), ("ifindex", c_uint32), ("mac", MAC), ("smac", MAC)]


class CzSf4Key(ctypes.Structure):
    """struct cz_sf4_key { __u32 prefixlen; __be32 addr; };"""

    _fields_ = [("prefixlen", c_uint32), ("addr", c_uint8 * 4)]


class CzSf6Key(ctypes.Structure):
    """struct cz_sf6_key { __u32 prefixlen; __u8 addr[16]; };"""

    _fields_ = [("prefixlen", c_uint32), ("addr", IP6)]


class CzSf(ctypes.Structure):
    """struct cz_sf { __u32 vpc_id, vni; __u8 prefix[16], mask[16]; __u8 router_mac[6];
    __u16 identity; };"""

    _fields_ = [
        ("vpc_id", c_uint32),
        ("vni", c_uint32),
        ("prefix", IP6),
        ("mask", IP6),
        ("router_mac", MAC),
        ("identity", c_uint16),
    ]


class CzHostKey(ctypes.Structure):
    """struct cz_host_key { __u32 vpc_id; __u32 family; __u8 addr[16]; };"""

    _fields_ = [("vpc_id", c_uint32), ("family", c_uint32), ("addr", IP6)]


class CzHost(ctypes.Structure):
    """struct cz_host { __be32 vtep; __u8 mac[6]; __u16 reserved; };"""

    _fields_ = [("vtep", c_uint8 * 4), ("mac", MAC), ("reserved", c_uint16)]


class CzCounter(ctypes.Structure):
    """struct cz_counter { __u64 packets; __u64 bytes; };"""

    _fields_ = [("packets", c_uint64), ("bytes", c_uint64)]


class CzVpcCounter(ctypes.Structure):
    """struct cz_vpc_counter { __u64 to_storage_packets, to_storage_bytes, to_compute_packets,
    to_compute_bytes; };"""

    _fields_ = [
        ("to_storage_packets", c_uint64),
        ("to_storage_bytes", c_uint64),
        ("to_compute_packets", c_uint64),
        ("to_compute_bytes", c_uint64),
    ]


class CzPolicyCounter(ctypes.Structure):
    """struct cz_policy_counter { __u64 small_packets, bulk_packets, flowlet_moves,
    rate_drop_packets, rate_drop_bytes, small_bytes, bulk_bytes, bare_packets; };"""

    _fields_ = [
        ("small_packets", c_uint64),
        ("bulk_packets", c_uint64),
        ("flowlet_moves", c_uint64),
        ("rate_drop_packets", c_uint64),
        ("rate_drop_bytes", c_uint64),
        ("small_bytes", c_uint64),
        ("bulk_bytes", c_uint64),
        ("bare_packets", c_uint64),
    ]


class CzFlow(ctypes.Structure):
    """struct cz_flow { __u32 vpc_id; __u8 dir, proto, family, live; __u32 src[4], dst[4];
    __u32 ports; __u32 salt; __u64 bytes; __u64 last_tick; };"""

    _fields_ = [
        ("vpc_id", c_uint32),
        ("dir", c_uint8),
        ("proto", c_uint8),
        ("family", c_uint8),
        ("live", c_uint8),
        ("src", IP6),
        ("dst", IP6),
        ("ports", c_uint8 * 4),
        ("salt", c_uint32),
        ("bytes", c_uint64),
        ("last_tick", c_uint64),
    ]


class CzTrace(ctypes.Structure):
    """struct cz_trace { enum cz_reason reason; __u32 port; __u32 vpc_id; __u32 seq; };"""

    _fields_ = [("reason", c_uint32), ("port", c_uint32), ("vpc_id", c_uint32), ("seq", c_uint32)]


# C struct name -> mirror, for the layout test.
MIRRORS: dict[str, type[ctypes.Structure]] = {
    "cz_config": CzConfig,
    "cz_port": CzPort,
    "cz_vpc": CzVpc,
    "cz_lpm4_key": CzLpm4Key,
    "cz_lpm6_key": CzLpm6Key,
    "cz_route": CzRoute,
    "cz_slot4": CzSlot4,
    "cz_slot6": CzSlot6,
    "cz_vtep_slot": CzVtepSlot,
    "cz_group": CzGroup,
    "cz_nexthop": CzNexthop,
    "cz_sf4_key": CzSf4Key,
    "cz_sf6_key": CzSf6Key,
    "cz_sf": CzSf,
    "cz_host_key": CzHostKey,
    "cz_host": CzHost,
    "cz_counter": CzCounter,
    "cz_vpc_counter": CzVpcCounter,
    "cz_trace": CzTrace,
    "cz_policy_counter": CzPolicyCounter,
    "cz_flow": CzFlow,
}


def fill(array: ctypes.Array, data: bytes) -> None:  # type: ignore[type-arg]
    """Copy bytes into a ctypes byte array field; ValueError if they do not fit."""
    # memmove does not know the field's size: longer data would write past the field and the
    # struct (issue 12: 41 IPv6 prefix lengths into the 32-byte plens6).
    size = ctypes.sizeof(array)
    if len(data) > size:
        raise ValueError(f"{len(data)} bytes do not fit a {size}-byte field")
    ctypes.memmove(array, data, len(data))
