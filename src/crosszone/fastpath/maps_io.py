"""Write compiled `Tables` into the gateway's BPF maps, and read its counters back.

This is the one sink that turns table entries into map writes. Entries are encoded with the
struct mirrors of `layout.py`; big tables go through batch updates. A full write is ordered
make-before-break: everything a route points at (ports, next hops, groups) is written before the
routes, and the VPC entry that enables a prefix length comes after the routes of that length.
"""

from __future__ import annotations

import ctypes
import dataclasses
import ipaddress
from collections.abc import Callable, Mapping

import numpy as np

from crosszone.abi import layout as L
from crosszone.abi.reasons import Reason
from crosszone.compile.tables import (
    Group,
    HostEntry,
    Nexthop,
    Port,
    Route,
    StorageFacing,
    Tables,
    Vpc,
)
from crosszone.fastpath.libbpf import BpfMap, BpfObject
from crosszone.fastpath.slot_table import SlotMap, wrap


def _b(s: ctypes.Structure) -> bytes:
    return bytes(s)


def _mask(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bytes:
    return int(net.netmask).to_bytes(net.max_prefixlen // 8, "big")


def encode_vpc(v: Vpc) -> bytes:
    """struct cz_vpc for vpc_by_vni."""
    s = L.CzVpc(vpc_id=v.vpc_id, flags=v.flags, n_plens4=len(v.plens4), n_plens6=len(v.plens6))
    if v.prefix4 is not None and v.sf4 is not None:
        L.fill(s.prefix4, v.prefix4.network_address.packed)
        L.fill(s.mask4, _mask(v.prefix4))
        L.fill(s.sf4, v.sf4.network_address.packed)
    if v.prefix6 is not None and v.sf6 is not None:
        L.fill(s.prefix6, v.prefix6.network_address.packed)
        L.fill(s.mask6, _mask(v.prefix6))
        L.fill(s.sf6, v.sf6.network_address.packed)
    L.fill(s.plens4, bytes(v.plens4))
    L.fill(s.plens6, bytes(v.plens6))
    return _b(s)


def encode_route_key(r: Route, lpm: bool) -> bytes:
    """struct cz_route4_key/cz_route6_key, or the LPM-trie baseline's key."""
    addr = r.prefix.network_address.packed
    k: ctypes.Structure
    if lpm:
        k = (L.CzLpm4Key if r.prefix.version == 4 else L.CzLpm6Key)(
            prefixlen=32 + r.prefix.prefixlen
        )
        L.fill(k.vpc_id, r.vpc_id.to_bytes(4, "big"))
    else:
        k = (L.CzRoute4Key if r.prefix.version == 4 else L.CzRoute6Key)(
            vpc_id=r.vpc_id, plen=r.prefix.prefixlen
        )
    L.fill(k.addr, addr)  # type: ignore[attr-defined]
    return _b(k)


def encode_route(r: Route) -> bytes:
    """struct cz_route."""
    return _b(L.CzRoute(action=r.action, group=r.group))


def encode_group(g: Group) -> bytes:
    """struct cz_group."""
    s = L.CzGroup(n_members=len(g.members))
    for i, b in enumerate(g.buckets):
        s.buckets[i] = b
    return _b(s)


def encode_nexthop(n: Nexthop, port: Port | None) -> bytes:
    """struct cz_nexthop, with a copy of its port's ifindex and MAC (None: no such port, so the
    next hop is unusable, as a missing port was before)."""
    s = L.CzNexthop(port=n.port, ifindex=port.ifindex if port else 0)
    L.fill(s.mac, n.mac)
    if port is not None:
        L.fill(s.smac, port.mac)
    return _b(s)


def encode_port(p: Port) -> bytes:
    """struct cz_port."""
    s = L.CzPort(ifindex=p.ifindex)
    L.fill(s.mac, p.mac)
    L.fill(s.next_hop_mac, p.next_hop_mac)
    return _b(s)


def encode_sf(sf: StorageFacing) -> tuple[bytes, bytes]:
    """(struct cz_sf4_key or cz_sf6_key, struct cz_sf)."""
    key_cls = L.CzSf4Key if sf.prefix.version == 4 else L.CzSf6Key
    k = key_cls(prefixlen=sf.prefix.prefixlen)
    L.fill(k.addr, sf.prefix.network_address.packed)
    v = L.CzSf(vpc_id=sf.vpc_id, vni=sf.vni, identity=int(sf.identity))
    L.fill(v.prefix, sf.vpc_prefix.network_address.packed)
    L.fill(v.mask, _mask(sf.vpc_prefix))
    L.fill(v.router_mac, sf.router_mac)
    return _b(k), _b(v)


def encode_host(h: HostEntry) -> tuple[bytes, bytes]:
    """(struct cz_host_key, struct cz_host)."""
    k = L.CzHostKey(vpc_id=h.vpc_id, family=h.addr.version)
    L.fill(k.addr, h.addr.packed)
    v = L.CzHost()
    L.fill(v.vtep, h.vtep.packed)
    L.fill(v.mac, h.mac)
    return _b(k), _b(v)


def encode_config(t: Tables) -> bytes:
    """struct cz_config."""
    c = L.CzConfig(flags=t.flags, compute_port=t.compute_port)
    L.fill(c.vtep, t.vtep.packed)
    return _b(c)


def encode_vtep(vni: int, vtep: ipaddress.IPv4Address) -> bytes:
    """struct cz_vtep_key."""
    k = L.CzVtepKey(vni=vni)
    L.fill(k.vtep, vtep.packed)
    return _b(k)


def bind_ports(t: Tables, ifindex_of: Callable[[str], int]) -> Tables:
    """Tables with each port's ifindex resolved from its interface name."""
    ports = tuple(dataclasses.replace(p, ifindex=ifindex_of(p.name)) for p in t.ports)
    return dataclasses.replace(t, ports=ports, _index={})


def _u32(i: int) -> bytes:
    return i.to_bytes(4, "little")


class GatewayMaps:
    """The maps of one loaded (or pinned) gateway program, by name."""

    def __init__(self, maps: Mapping[str, BpfMap]) -> None:
        # the slot tables also appear under the logical maps they hold (routes4, routes6,
        # vtep_allowed), which is how everything above this module names them
        self.maps: dict[str, BpfMap | SlotMap] = wrap(dict(maps))
        self.lpm = "routes4_lpm" in self.maps

    def close(self) -> None:
        """Let go of the slot tables' mappings (each holds its map until closed or freed)."""
        for m in self.maps.values():
            if isinstance(m, SlotMap):
                m.close()

    @classmethod
    def of(cls, obj: BpfObject) -> GatewayMaps:
        """The maps of a loaded object."""
        return cls(obj.maps)

    def write(
        self, t: Tables, devmap_ifindex: Callable[[Port], int] | None = None
    ) -> None:
        """Program every table, make-before-break.

        devmap_ifindex gives the device a port's devmap slot points at; by default the port's own
        ifindex (tests point the slots at lo, since test runs never transmit)."""
        m = self.maps
        for p in t.ports:
            m["ports"].update(_u32(p.index), encode_port(p))
            target = devmap_ifindex(p) if devmap_ifindex else p.ifindex
            if target:
                m["tx_ports"].update(_u32(p.index), _u32(target))
        for n in t.nexthops:
            m["nexthops"].update(_u32(n.nh_id), encode_nexthop(n, t.port_at(n.port)))
        for g in t.groups:
            m["ecmp_groups"].update(_u32(g.group_id), encode_group(g))
        if t.hosts:
            keys, vals = zip(*(encode_host(h) for h in t.hosts))
            m["hosts"].update_batch(list(keys), list(vals))
        self.write_routes(t.routes)
        for sf in t.storage_facing:
            sf_key, sf_val = encode_sf(sf)
            m["sf4" if sf.prefix.version == 4 else "sf6"].update(sf_key, sf_val)
        for v in t.vpcs:
            m["vpcs"].update(_u32(v.vpc_id), encode_vpc(v))
            m["vpc_by_vni"].update(_u32(v.vni), _u32(v.vpc_id))
        # The VTEP set admits traffic into a VPC: written once the VPC is complete.
        if t.vteps:
            vpc_of = {v.vni: v.vpc_id for v in t.vpcs}
            pairs = sorted(t.vteps)
            m["vtep_allowed"].update_batch(
                [encode_vtep(vni, ip) for vni, ip in pairs], [_u32(vpc_of[vni]) for vni, _ in pairs]
            )
        m["config"].update(_u32(0), encode_config(t))

    def write_routes(self, routes: tuple[Route, ...] | list[Route]) -> None:
        """Batch-write routes into the IPv4 and IPv6 route tables."""
        for fam in (4, 6):
            sel = [r for r in routes if r.prefix.version == fam]
            if not sel:
                continue
            arr = RouteArrays.of(sel)
            self.write_route_arrays(arr)

    def write_route_arrays(self, arr: RouteArrays) -> int:
        """Batch-write routes given as arrays (the bulk path: 1M routes in under a second)."""
        name = ("routes4" if arr.family == 4 else "routes6") + ("_lpm" if self.lpm else "")
        keys, values = arr.encode(self.lpm)
        return self.maps[name].update_batch(keys, values)

    def set_flags(self, t: Tables, flags: int) -> None:
        """Rewrite the config entry with other flags (e.g. CZ_CFG_TRACE)."""
        self.maps["config"].update(_u32(0), encode_config(dataclasses.replace(t, flags=flags)))

    def _percpu(self, name: str, index: int) -> list[bytes]:
        """One entry of a per-CPU array map, a value per CPU (those maps are never slot tables)."""
        m = self.maps[name]
        assert isinstance(m, BpfMap), name
        return m.lookup_percpu(_u32(index))

    def reason_stats(self) -> dict[Reason, tuple[int, int]]:
        """Reason -> (packets, bytes), summed over CPUs."""
        out = {}
        for r in Reason:
            pk = by = 0
            for raw in self._percpu("reason_stats", int(r)):
                c = L.CzCounter.from_buffer_copy(raw[: ctypes.sizeof(L.CzCounter)])
                pk += c.packets
                by += c.bytes
            out[r] = (pk, by)
        return out

    def vpc_stats(self, vpc_id: int) -> L.CzVpcCounter:
        """Forwarded packets and bytes of one VPC in both directions, summed over CPUs."""
        total = L.CzVpcCounter()
        for raw in self._percpu("vpc_stats", vpc_id):
            c = L.CzVpcCounter.from_buffer_copy(raw[: ctypes.sizeof(L.CzVpcCounter)])
            for f in (
                "to_storage_packets",
                "to_storage_bytes",
                "to_compute_packets",
                "to_compute_bytes",
            ):
                setattr(total, f, getattr(total, f) + getattr(c, f))
        return total

    def last_trace(self, cpu: int) -> L.CzTrace:
        """The trace record of one CPU (only filled with CZ_CFG_TRACE)."""
        raw = self._percpu("trace", 0)[cpu]
        return L.CzTrace.from_buffer_copy(raw[: ctypes.sizeof(L.CzTrace)])


_KEY4 = np.dtype([("vpc_id", "<u4"), ("plen", "<u4"), ("addr", ">u4")])
_LPM4 = np.dtype([("prefixlen", "<u4"), ("vpc_id", ">u4"), ("addr", ">u4")])
_KEY6 = np.dtype([("vpc_id", "<u4"), ("plen", "<u4"), ("hi", ">u8"), ("lo", ">u8")])
_LPM6 = np.dtype([("prefixlen", "<u4"), ("vpc_id", ">u4"), ("hi", ">u8"), ("lo", ">u8")])
_ROUTE = np.dtype(L.CzRoute)


@dataclasses.dataclass
class RouteArrays:
    """Routes of one family as parallel arrays, encoded to map keys without a Python loop.

    addr is the masked network address: uint32 for IPv4, (hi, lo) uint64 halves for IPv6."""

    family: int
    vpc_id: np.ndarray
    plen: np.ndarray
    addr: np.ndarray  # IPv4: uint32; IPv6: uint64 high half
    addr_lo: np.ndarray | None  # IPv6 low half
    action: np.ndarray
    group: np.ndarray

    @classmethod
    def of(cls, routes: list[Route]) -> RouteArrays:
        """Arrays from Route objects of one family."""
        fam = routes[0].prefix.version
        n = len(routes)
        ints = [int(r.prefix.network_address) for r in routes]
        if fam == 4:
            hi, lo = np.fromiter(ints, np.uint32, n), None
        else:
            hi = np.fromiter((a >> 64 for a in ints), np.uint64, n)
            lo = np.fromiter((a & 0xFFFFFFFFFFFFFFFF for a in ints), np.uint64, n)
        return cls(
            fam,
            np.fromiter((r.vpc_id for r in routes), np.uint32, n),
            np.fromiter((r.prefix.prefixlen for r in routes), np.uint32, n),
            hi,
            lo,
            np.fromiter((r.action for r in routes), np.uint32, n),
            np.fromiter((r.group for r in routes), np.uint32, n),
        )

    def encode(self, lpm: bool) -> tuple[bytes, bytes]:
        """(keys, values) as contiguous buffers in the C layouts."""
        n = len(self.vpc_id)
        if self.family == 4:
            k = np.empty(n, _LPM4 if lpm else _KEY4)
            k["addr"] = self.addr
        else:
            k = np.empty(n, _LPM6 if lpm else _KEY6)
            k["hi"], k["lo"] = self.addr, self.addr_lo
        k["vpc_id"] = self.vpc_id
        if lpm:
            k["prefixlen"] = 32 + self.plen
        else:
            k["plen"] = self.plen
        v = np.empty(n, _ROUTE)
        v["action"], v["group"] = self.action, self.group
        return k.tobytes(), v.tobytes()

