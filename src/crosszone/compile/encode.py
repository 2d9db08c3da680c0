"""Encode compiled `Tables` into map entries: the one place that turns table rows into key and
value bytes.

A gateway state is `Entries`: map name -> {key bytes: value bytes}, exactly what the BPF maps
hold. The record layouts are the ctypes mirrors of `abi/layout.py` (checked against the compiled
object's BTF by tests/fastpath/test_layout.py); the numpy dtypes below are derived from them
(`np.dtype(L.CzRoute4Key)`), never declared again. Big tables (hosts, VTEPs, routes) are encoded
with numpy, a whole table per call; the few per-gateway rows (ports, next hops, groups, VPCs,
storage-facing prefixes, config) fill a ctypes mirror each.

The route tables are named by their logical key (`CzRoute4Key`/`CzRoute6Key`, what the slot
tables index); `route_keys_to_lpm` gives the LPM-trie baseline's keys of the same routes.
"""

from __future__ import annotations

import ctypes
import dataclasses
import ipaddress
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any, TypeVar, overload

import numpy as np

from crosszone.abi import layout as L
from crosszone.abi.ticks import kernel_tick_ns, ticks_for
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
from crosszone.intent.hosts import HostSet

#: Map name -> its entries: a dict, or a `Records` (the bulk route tables, two buffers).
Entries = dict[str, MutableMapping[bytes, bytes]]

#: The logical maps of a gateway, in dependency order: each may point at entries of the maps
#: before it (compile.diff writes in this order and deletes in the reverse one).
MAP_ORDER: tuple[str, ...] = (
    "ports", "tx_ports", "nexthops", "ecmp_groups", "hosts", "routes4", "routes6",
    "sf4", "sf6", "vpcs", "vpc_by_vni", "vtep_allowed", "config",
)
#: Array maps: every index exists, so nothing is deleted there.
ARRAY_MAPS = frozenset({"ports", "tx_ports", "nexthops", "ecmp_groups", "config", "vpcs"})

# Record layouts, derived from the BTF-checked mirrors.
HOST_KEY = np.dtype(L.CzHostKey)
HOST = np.dtype(L.CzHost)
VTEP_KEY = np.dtype(L.CzVtepKey)
ROUTE4_KEY = np.dtype(L.CzRoute4Key)
ROUTE6_KEY = np.dtype(L.CzRoute6Key)
LPM4_KEY = np.dtype(L.CzLpm4Key)
LPM6_KEY = np.dtype(L.CzLpm6Key)
ROUTE = np.dtype(L.CzRoute)
U32 = np.dtype("<u4")  # array indexes, VPC ids, ifindexes


def u32(i: int) -> bytes:
    """An array index or a u32 value as map bytes."""
    return i.to_bytes(4, "little")


def split(buf: bytes, size: int) -> list[bytes]:
    """A contiguous buffer of fixed-size records -> the records."""
    if not buf:
        return []
    return np.frombuffer(buf, f"V{size}").tolist()  # type: ignore[no-any-return]  # C loop


def records(keys: np.ndarray, values: np.ndarray) -> dict[bytes, bytes]:
    """Parallel record arrays -> {key bytes: value bytes}."""
    return dict(zip(split(keys.tobytes(), keys.dtype.itemsize),
                    split(values.tobytes(), values.dtype.itemsize)))


class RecordList(Sequence[bytes]):
    """Fixed-size records in one contiguous buffer, seen as a list of bytes.

    A sink passes `buffer` to a batch update as it is; joining a million bytes objects again
    would cost more than the update (bench fastpath: program_routes)."""

    def __init__(self, buffer: bytes, size: int) -> None:
        self.buffer = buffer
        self.size = size

    def __len__(self) -> int:
        return len(self.buffer) // self.size

    @overload
    def __getitem__(self, i: int) -> bytes: ...
    @overload
    def __getitem__(self, i: slice) -> list[bytes]: ...
    def __getitem__(self, i: int | slice) -> bytes | list[bytes]:
        if isinstance(i, slice):
            return split(self.buffer, self.size)[i]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        i %= n
        return self.buffer[i * self.size:(i + 1) * self.size]

    def __iter__(self) -> Iterator[bytes]:
        return iter(split(self.buffer, self.size))


class Records(MutableMapping[bytes, bytes]):
    """Entries encoded as two contiguous buffers (a bulk table: a million routes), a mapping
    like any other map's entries. The dict is built only when a key is looked up or an entry
    changes; a diff against an empty map hands the buffers on as they are (`record_lists`)."""

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        self.keys_buf = keys.tobytes()
        self.values_buf = values.tobytes()
        self.key_size = keys.dtype.itemsize
        self.value_size = values.dtype.itemsize
        self._n = len(keys)
        self._dict: dict[bytes, bytes] | None = None
        self._changed = False  # the dict differs from the buffers

    @property
    def dict(self) -> dict[bytes, bytes]:
        """The entries as a dict (built once)."""
        if self._dict is None:
            self._dict = dict(zip(split(self.keys_buf, self.key_size),
                                  split(self.values_buf, self.value_size)))
        return self._dict

    @classmethod
    def join(cls, parts: Sequence[Records]) -> Records:
        """One Records of several with the same layouts (their buffers concatenated)."""
        out = cls.__new__(cls)
        out.keys_buf = b"".join(p.keys_buf for p in parts)
        out.values_buf = b"".join(p.values_buf for p in parts)
        out.key_size, out.value_size = parts[0].key_size, parts[0].value_size
        out._n = sum(p._n for p in parts)
        out._dict = None
        out._changed = False
        return out

    def record_lists(self) -> tuple[RecordList, RecordList]:
        """(keys, values) in encoding order, without building the dict (after a change, in the
        dict's order)."""
        if self._changed and self._dict is not None:
            return (RecordList(b"".join(self._dict), self.key_size),
                    RecordList(b"".join(self._dict.values()), self.value_size))
        return RecordList(self.keys_buf, self.key_size), RecordList(self.values_buf,
                                                                    self.value_size)

    def __setitem__(self, k: bytes, v: bytes) -> None:
        self.dict[k] = v
        self._changed = True

    def __delitem__(self, k: bytes) -> None:
        del self.dict[k]
        self._changed = True

    def update(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """dict.update on the entries (one C-level update, not a loop of __setitem__)."""
        self.dict.update(*args, **kwargs)
        self._changed = True

    def __len__(self) -> int:
        return self._n if self._dict is None else len(self._dict)

    def __getitem__(self, k: bytes) -> bytes:
        d = self._dict if self._dict is not None else self.dict
        return d[k]

    def __contains__(self, k: object) -> bool:
        d = self._dict if self._dict is not None else self.dict
        return k in d

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.dict)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping) and len(other) != len(self):
            return False
        return self.dict == (other.dict if isinstance(other, Records) else other)

    __hash__ = None  # type: ignore[assignment]  # a mapping, like dict


_S = TypeVar("_S", bound=ctypes.Structure)


def same_named(s: _S, entry: object) -> _S:
    """s with every integer field set from entry's integer (or bool) attribute of the same name.

    A table entry and its C struct share field names, so a new integer field of an entry (say a
    per-VPC weight added to `tables.Vpc` and to `struct cz_vpc` and its mirror) is encoded
    without touching this module. Addresses, MACs and arrays differ in form and stay explicit."""
    fields = [f for cls in reversed(type(s).__mro__) for f in cls.__dict__.get("_fields_", ())]
    for name, ctype, *_ in fields:
        value = getattr(entry, name, None)
        if isinstance(value, int) and issubclass(ctype, ctypes._SimpleCData):
            setattr(s, name, int(value))
    return s


def _mask(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bytes:
    return int(net.netmask).to_bytes(net.max_prefixlen // 8, "big")


def encode_vpc(v: Vpc) -> bytes:
    """struct cz_vpc (the value of vpcs[vpc_id])."""
    s = same_named(L.CzVpc(n_plens4=len(v.plens4), n_plens6=len(v.plens6)), v)
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
    return bytes(s)


def encode_group(g: Group) -> bytes:
    """struct cz_group."""
    s = L.CzGroup(n_members=len(g.members))
    for i, b in enumerate(g.buckets):
        s.buckets[i] = b
    return bytes(s)


def encode_nexthop(n: Nexthop, port: Port | None) -> bytes:
    """struct cz_nexthop, with a copy of its port's ifindex and MAC (None: no such port, so the
    next hop is unusable, as a missing port was before)."""
    s = same_named(L.CzNexthop(ifindex=port.ifindex if port else 0), n)
    L.fill(s.mac, n.mac)
    if port is not None:
        L.fill(s.smac, port.mac)
    return bytes(s)


def encode_port(p: Port) -> bytes:
    """struct cz_port."""
    s = same_named(L.CzPort(), p)
    L.fill(s.mac, p.mac)
    L.fill(s.next_hop_mac, p.next_hop_mac)
    return bytes(s)


def encode_sf(sf: StorageFacing) -> tuple[bytes, bytes]:
    """(struct cz_sf4_key or cz_sf6_key, struct cz_sf)."""
    key_cls = L.CzSf4Key if sf.prefix.version == 4 else L.CzSf6Key
    k = key_cls(prefixlen=sf.prefix.prefixlen)
    L.fill(k.addr, sf.prefix.network_address.packed)
    v = same_named(L.CzSf(), sf)
    L.fill(v.prefix, sf.vpc_prefix.network_address.packed)
    L.fill(v.mask, _mask(sf.vpc_prefix))
    L.fill(v.router_mac, sf.router_mac)
    return bytes(k), bytes(v)


def encode_config(t: Tables, tick_ns: int | None = None) -> bytes:
    """struct cz_config; the policy's durations in jiffies of this kernel (abi/ticks.py) unless
    tick_ns says how long one is."""
    c = same_named(L.CzConfig(), t)
    L.fill(c.vtep, t.vtep.packed)
    tick = tick_ns or kernel_tick_ns()
    c.flowlet_gap_ticks = ticks_for(t.flowlet_gap_ns, tick)
    c.flow_idle_ticks = ticks_for(t.flow_idle_ns, tick)
    return bytes(c)


def encode_hosts(hosts: Sequence[HostEntry]) -> dict[bytes, bytes]:
    """hosts entries (struct cz_host_key -> struct cz_host), a whole table per numpy call."""
    n = len(hosts)
    if n == 0:
        return {}
    k = np.zeros(n, HOST_KEY)
    v = np.zeros(n, HOST)
    k["vpc_id"] = np.fromiter((h.vpc_id for h in hosts), np.uint32, n)
    k["family"] = np.fromiter((h.addr.version for h in hosts), np.uint32, n)
    k["addr"] = np.frombuffer(b"".join([h.addr.packed.ljust(16, b"\0") for h in hosts]),
                              np.uint8).reshape(n, 16)
    v["vtep"] = np.frombuffer(b"".join([h.vtep.packed for h in hosts]), np.uint8).reshape(n, 4)
    v["mac"] = np.frombuffer(b"".join([h.mac for h in hosts]), np.uint8).reshape(n, 6)
    return records(k, v)


def encode_host_set(hs: HostSet, vpc_id: np.ndarray, vni: np.ndarray
                    ) -> tuple[dict[bytes, bytes], dict[bytes, bytes]]:
    """(hosts entries, vtep_allowed entries) of compact hosts, straight from their arrays.

    vpc_id and vni give, per host, its VPC's id and VNI (the caller maps the VPC names)."""
    n4, n6 = len(hs.a4), len(hs.hi6)
    if n4 + n6 == 0:
        return {}, {}
    k = np.zeros(n4 + n6, HOST_KEY)
    v = np.zeros(n4 + n6, HOST)
    owner = np.concatenate([hs.h4, hs.h6])
    k["vpc_id"] = vpc_id[owner]
    k["family"][:n4] = 4
    k["family"][n4:] = 6
    k["addr"][:n4, :4] = hs.a4.astype(">u4").view(np.uint8).reshape(n4, 4)
    k["addr"][n4:, :8] = hs.hi6.astype(">u8").view(np.uint8).reshape(n6, 8)
    k["addr"][n4:, 8:] = hs.lo6.astype(">u8").view(np.uint8).reshape(n6, 8)
    v["vtep"] = hs.vtep[owner].astype(">u4").view(np.uint8).reshape(-1, 4)
    v["mac"] = hs.mac[owner].astype(">u8").view(np.uint8).reshape(-1, 8)[:, 2:]
    pairs = np.unique((vni.astype(np.uint64) << np.uint64(32)) | hs.vtep.astype(np.uint64))
    vk = np.zeros(len(pairs), VTEP_KEY)
    vk["vni"] = (pairs >> np.uint64(32)).astype(np.uint32)
    vk["vtep"] = (pairs & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    # the value is the VPC id of the pair's VNI
    vni_to_id = dict(zip(vni.tolist(), vpc_id.tolist()))
    ids = np.array([vni_to_id[int(x)] for x in (pairs >> np.uint64(32)).tolist()], U32)
    return records(k, v), records(vk, ids)


def encode_vteps(vteps: Iterable[tuple[int, ipaddress.IPv4Address]], vpc_of: dict[int, int]
                 ) -> dict[bytes, bytes]:
    """Allowed (VNI, VTEP) -> VPC id entries (vtep_allowed)."""
    pairs = list(vteps)
    n = len(pairs)
    if n == 0:
        return {}
    k = np.zeros(n, VTEP_KEY)
    k["vni"] = np.fromiter((vni for vni, _ in pairs), np.uint32, n)
    k["vtep"] = np.fromiter((int(ip) for _, ip in pairs), np.uint32, n)
    return records(k, np.fromiter((vpc_of[vni] for vni, _ in pairs), U32, n))


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

    @property
    def name(self) -> str:
        """The logical map these routes go to."""
        return "routes4" if self.family == 4 else "routes6"

    def keys(self, lpm: bool = False) -> np.ndarray:
        """Route keys (struct cz_route4_key/cz_route6_key, or the LPM trie's keys)."""
        n = len(self.vpc_id)
        if lpm:
            k = np.empty(n, LPM4_KEY if self.family == 4 else LPM6_KEY)
            k["prefixlen"] = 32 + self.plen
        else:
            k = np.empty(n, ROUTE4_KEY if self.family == 4 else ROUTE6_KEY)
            k["plen"] = self.plen
        k["vpc_id"] = self.vpc_id
        if self.family == 4:
            k["addr"] = self.addr
        else:
            k["addr"][:, 0], k["addr"][:, 1] = self.addr, self.addr_lo
        return k

    def values(self) -> np.ndarray:
        """struct cz_route of each route."""
        v = np.empty(len(self.vpc_id), ROUTE)
        v["action"], v["group"] = self.action, self.group
        return v

    def encode(self, lpm: bool = False) -> tuple[bytes, bytes]:
        """(keys, values) as contiguous buffers in the C layouts."""
        return self.keys(lpm).tobytes(), self.values().tobytes()


def encode_route_arrays(arr: RouteArrays) -> tuple[str, Records]:
    """(map name, entries) of a family's routes given as arrays (kept as buffers until a key
    is looked up: a first program of a million routes never builds the dict)."""
    return arr.name, Records(arr.keys(), arr.values())


def encode_routes(routes: Iterable[Route]) -> list[RouteArrays]:
    """Route objects as arrays, one per family present."""
    rs = list(routes)
    return [RouteArrays.of(sel) for fam in (4, 6)
            if (sel := [r for r in rs if r.prefix.version == fam])]


def route_keys_to_lpm(keys: bytes, family: int) -> bytes:
    """Route keys (cz_route4_key/cz_route6_key) -> the LPM trie's keys of the same routes."""
    src = np.frombuffer(keys, ROUTE4_KEY if family == 4 else ROUTE6_KEY)
    out = np.empty(len(src), LPM4_KEY if family == 4 else LPM6_KEY)
    out["prefixlen"] = 32 + src["plen"]
    out["vpc_id"] = src["vpc_id"]
    out["addr"] = src["addr"]
    return out.tobytes()


def lpm_keys_to_route(keys: bytes, family: int) -> bytes:
    """The LPM trie's keys -> route keys (the inverse of `route_keys_to_lpm`)."""
    src = np.frombuffer(keys, LPM4_KEY if family == 4 else LPM6_KEY)
    out = np.empty(len(src), ROUTE4_KEY if family == 4 else ROUTE6_KEY)
    out["plen"] = src["prefixlen"] - 32
    out["vpc_id"] = src["vpc_id"]
    out["addr"] = src["addr"]
    return out.tobytes()


def bind_ports(t: Tables, ifindex_of: Callable[[str], int]) -> Tables:
    """Tables with each port's ifindex resolved from its interface name."""
    ports = tuple(dataclasses.replace(p, ifindex=ifindex_of(p.name)) for p in t.ports)
    return dataclasses.replace(t, ports=ports, _index={})


def encode_tables(t: Tables, extra_routes: Iterable[RouteArrays] = (),
                  devmap_ifindex: Callable[[Port], int] | None = None) -> Entries:
    """Every map entry of a gateway programmed with t (plus routes given as arrays).

    devmap_ifindex gives the device a port's devmap slot (tx_ports) points at; by default the
    port's own ifindex (test runs point the slots at lo, since they never transmit)."""
    e: Entries = {name: {} for name in MAP_ORDER}
    for p in t.ports:
        e["ports"][u32(p.index)] = encode_port(p)
        target = devmap_ifindex(p) if devmap_ifindex else p.ifindex
        if target:
            e["tx_ports"][u32(p.index)] = u32(target)
    for n in t.nexthops:
        e["nexthops"][u32(n.nh_id)] = encode_nexthop(n, t.port_at(n.port))
    for g in t.groups:
        e["ecmp_groups"][u32(g.group_id)] = encode_group(g)
    e["hosts"] = encode_hosts(t.hosts)
    vpc_of = {v.vni: v.vpc_id for v in t.vpcs}
    e["vtep_allowed"] = encode_vteps(t.vteps, vpc_of)
    # The routes of a family stay one Records (two buffers): merging them into a dict key by key
    # costs seconds for a million routes, and a first program hands the buffers on as they are.
    routes: dict[str, list[Records]] = {}
    for arr in [*encode_routes(t.routes), *extra_routes]:
        name, entries = encode_route_arrays(arr)
        routes.setdefault(name, []).append(entries)
    for name, parts in routes.items():
        e[name] = parts[0] if len(parts) == 1 else Records.join(parts)
    for sf in t.storage_facing:
        k, v = encode_sf(sf)
        e["sf4" if sf.prefix.version == 4 else "sf6"][k] = v
    for vpc in t.vpcs:
        e["vpcs"][u32(vpc.vpc_id)] = encode_vpc(vpc)
        e["vpc_by_vni"][u32(vpc.vni)] = u32(vpc.vpc_id)
    e["config"][u32(0)] = encode_config(t)
    return e
