"""Compile a validated cluster, for one of its gateways, into the fast path's table entries.

`compile_tables(cluster, gateway)` is a pure function. Its result, `Tables`, is the one
description of the data plane's state: the encoder turns it into map entries, and the reference
model (`crosszone.fastpath.testing.model`) executes it directly. Same tables in, same packets out.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import TypedDict

from crosszone.abi import layout
from crosszone.compile.ecmp import rendezvous_buckets
from crosszone.intent.schema import Cluster

Net = ipaddress.IPv4Network | ipaddress.IPv6Network

ACTIONS = {
    "forward": layout.CZ_ACT_FORWARD,
    "drop": layout.CZ_ACT_BLACKHOLE,
    "slowpath": layout.CZ_ACT_SLOWPATH,
}


def mac_bytes(mac: str) -> bytes:
    """'02:00:00:00:00:01' -> 6 bytes."""
    return bytes.fromhex(mac.replace(":", ""))


@dataclass(frozen=True)
class Port:
    """ports[index]; ifindex is bound at attach time (0 = not bound)."""

    index: int
    name: str
    role: str
    mac: bytes
    next_hop_mac: bytes
    ifindex: int = 0


@dataclass(frozen=True)
class Vpc:
    """vpc_by_vni[vni]."""

    vpc_id: int
    vni: int
    name: str
    prefix4: ipaddress.IPv4Network | None
    sf4: ipaddress.IPv4Network | None  # equal to prefix4 for identity
    prefix6: ipaddress.IPv6Network | None
    sf6: ipaddress.IPv6Network | None
    identity: bool
    router_mac: bytes
    plens4: tuple[int, ...]  # descending
    plens6: tuple[int, ...]
    rate_ns_per_mib: int = 0  # token bucket: ns a MiB takes at the VPC's rate (0: no limit)
    burst_ns: int = 0  # the bucket's depth as time at that rate

    @property
    def flags(self) -> int:
        """CZ_VPC_* bits."""
        f = 0
        if self.prefix4 is not None:
            f |= layout.CZ_VPC_HAS4 | (0 if self.identity else layout.CZ_VPC_XLAT4)
        if self.prefix6 is not None:
            f |= layout.CZ_VPC_HAS6 | (0 if self.identity else layout.CZ_VPC_XLAT6)
        return f


@dataclass(frozen=True)
class Route:
    """routes4/routes6[(vpc_id, prefix)]."""

    vpc_id: int
    prefix: Net
    action: int
    group: int


@dataclass(frozen=True)
class Group:
    """ecmp_groups[group_id]: 256 buckets of next-hop ids."""

    group_id: int
    name: str
    members: tuple[int, ...]
    buckets: tuple[int, ...]


@dataclass(frozen=True)
class Nexthop:
    """nexthops[nh_id]."""

    nh_id: int
    name: str
    port: int
    mac: bytes


@dataclass(frozen=True)
class StorageFacing:
    """sf4/sf6[prefix]: a storage-facing prefix and the VPC behind it."""

    prefix: Net
    vpc_id: int
    vni: int
    vpc_prefix: Net
    router_mac: bytes
    identity: bool


@dataclass(frozen=True)
class HostEntry:
    """hosts[(vpc_id, address)]."""

    vpc_id: int
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address
    vtep: ipaddress.IPv4Address
    mac: bytes


@dataclass(frozen=True)
class Tables:
    """Everything the fast path needs, as plain values."""

    vtep: ipaddress.IPv4Address
    compute_port: int
    ports: tuple[Port, ...]
    vpcs: tuple[Vpc, ...]
    vteps: frozenset[tuple[int, ipaddress.IPv4Address]]
    routes: tuple[Route, ...]
    groups: tuple[Group, ...]
    nexthops: tuple[Nexthop, ...]
    storage_facing: tuple[StorageFacing, ...]
    hosts: tuple[HostEntry, ...]
    flags: int = 0  # CZ_CFG_*
    # The traffic policy (struct cz_config; read by the fast path only with CZ_CFG_POLICY).
    small_dscp: int = 0
    bulk_dscp: int = 0
    elephant_bytes: int = 0
    flowlet_gap_ns: int = 0
    flow_idle_ns: int = 0
    _index: dict = field(default_factory=dict, compare=False, repr=False)

    def port_by_name(self, name: str) -> Port:
        """The port with this interface name."""
        return next(p for p in self.ports if p.name == name)

    def port_at(self, index: int) -> Port | None:
        """The port with this index, or None."""
        return next((p for p in self.ports if p.index == index), None)


def _v4(net: Net | None) -> ipaddress.IPv4Network | None:
    assert net is None or isinstance(net, ipaddress.IPv4Network)
    return net


def _v6(net: Net | None) -> ipaddress.IPv6Network | None:
    assert net is None or isinstance(net, ipaddress.IPv6Network)
    return net


def _host_entries(c: Cluster, vpc_id_of: dict[str, int], vni_of: dict[str, int], core: bool
                  ) -> tuple[tuple[HostEntry, ...], frozenset[tuple[int, ipaddress.IPv4Address]]]:
    """Host entries and (VNI, VTEP) pairs: the verbose hosts, then the compact ones unless core."""
    hosts = [HostEntry(vpc_id_of[h.vpc], addr, h.vtep, mac_bytes(h.mac))
             for h in c.hosts for addr in h.addresses]
    vteps = {(vni_of[h.vpc], h.vtep) for h in c.hosts}
    hs = c.hosts_compact
    if not core and len(hs):
        # one object per host: fine for the small sets compiled this way (the agent compiles
        # with core=True and encodes the compact hosts from their arrays)
        macs = hs.mac.tolist()
        for i in range(len(hs)):
            vtep = ipaddress.IPv4Address(int(hs.vtep[i]))
            mac = int(macs[i]).to_bytes(6, "big")
            hosts += [HostEntry(vpc_id_of[hs.vpcs[i]], addr, vtep, mac)
                      for addr in hs.addresses_of(i)]
            vteps.add((vni_of[hs.vpcs[i]], vtep))
    return tuple(hosts), frozenset(vteps)


MIB_BITS = 8 << 20


def rate_fields(rate_mbps: int | None, burst_kib: int) -> tuple[int, int]:
    """(rate_ns_per_mib, burst_ns) of a VPC's token bucket; (0, 0) without a rate."""
    if rate_mbps is None:
        return 0, 0
    # ns = bits / (Mbit/s) * 1000, rounded to the nearest ns
    return ((MIB_BITS * 1000 + rate_mbps // 2) // rate_mbps,
            (burst_kib * 8192 * 1000 + rate_mbps // 2) // rate_mbps)


class PolicyFields(TypedDict):
    """The `Tables` fields `policy_fields` fills (passed on as keyword arguments)."""

    flags: int
    small_dscp: int
    bulk_dscp: int
    elephant_bytes: int
    flowlet_gap_ns: int
    flow_idle_ns: int


def policy_fields(c: Cluster) -> PolicyFields:
    """The config flags and fields of the traffic policy and of the VPCs' rates."""
    p = c.policy
    flags = layout.CZ_CFG_POLICY if p.enabled else 0
    if any(v.rate_mbps is not None for v in c.vpcs):
        flags |= layout.CZ_CFG_RATES
    return {"flags": flags, "small_dscp": p.small_dscp, "bulk_dscp": p.bulk_dscp,
            "elephant_bytes": p.elephant_bytes, "flowlet_gap_ns": p.flowlet_gap_us * 1000,
            "flow_idle_ns": p.flow_idle_ms * 1_000_000}


def compile_tables(c: Cluster, gateway: str, core: bool = False) -> Tables:
    """(Cluster, gateway name) -> Tables (KeyError if the cluster has no such gateway).

    Deterministic: the same cluster always gives equal tables. core=True leaves the storage
    pools' prefixes and the compact hosts out: `compile.gateway.compile_gateway` compiles those
    from their numpy arrays, a million routes never becoming Python objects."""
    gw = c.gateway(gateway)
    ports = tuple(
        Port(
            index=i,
            name=itf.name,
            role=itf.role,
            mac=mac_bytes(itf.mac),
            next_hop_mac=mac_bytes(itf.next_hop_mac or "00:00:00:00:00:00"),
        )
        for i, itf in enumerate(gw.interfaces)
    )
    port_index = {p.name: p.index for p in ports}
    compute_port = next(p.index for p in ports if p.role == "compute")

    nexthops: list[Nexthop] = []
    groups: list[Group] = []
    group_of: dict[str, int] = {}
    for g, pool in enumerate(c.storage_pools):
        members = []
        for nh in pool.next_hops:
            nexthops.append(
                Nexthop(
                    len(nexthops),
                    f"{pool.name}/{nh.name}",
                    port_index[nh.interface],
                    mac_bytes(nh.mac),
                )
            )
            members.append(nexthops[-1])
        buckets = rendezvous_buckets([(m.name, m.nh_id) for m in members], layout.CZ_ECMP_BUCKETS)
        groups.append(Group(g, pool.name, tuple(m.nh_id for m in members), buckets))
        group_of[pool.name] = g
    # A VPC's routes: a forward route to every prefix of its pools, then its own routes.
    pool_nets: dict[str, list[Net]] = {
        p.name: [] if core else p.prefixes.networks() for p in c.storage_pools
    }
    forward = ACTIONS["forward"]

    vpcs: list[Vpc] = []
    routes: list[Route] = []
    sfs: list[StorageFacing] = []
    vpc_id_of: dict[str, int] = {}
    # VPC ids follow VNI order so that they do not depend on the order of the file.
    for vpc_id, v in enumerate(sorted(c.vpcs, key=lambda v: v.vni)):
        vpc_id_of[v.name] = vpc_id
        own: dict[int, Net] = {n.version: n for n in v.prefixes}
        identity = v.storage_facing == "identity"
        sf: dict[int, Net] = (
            own if isinstance(v.storage_facing, str) else {n.version: n for n in v.storage_facing}
        )
        vroutes = [Route(vpc_id, net, forward, group_of[name])
                   for name in v.storage_pools for net in pool_nets[name]]
        vroutes += [Route(vpc_id, r.prefix, ACTIONS[r.action], group_of[r.pool] if r.pool else 0)
                    for r in v.routes]
        routes.extend(vroutes)
        plens4 = tuple(
            sorted({r.prefix.prefixlen for r in vroutes if r.prefix.version == 4}, reverse=True)
        )
        plens6 = tuple(
            sorted({r.prefix.prefixlen for r in vroutes if r.prefix.version == 6}, reverse=True)
        )
        router_mac = mac_bytes(v.router_mac)
        vpcs.append(
            Vpc(
                vpc_id,
                v.vni,
                v.name,
                _v4(own.get(4)),
                _v4(sf.get(4)),
                _v6(own.get(6)),
                _v6(sf.get(6)),
                identity,
                router_mac,
                plens4,
                plens6,
                *rate_fields(v.rate_mbps, v.burst_kib),
            )
        )
        for fam in sorted(own):
            sfs.append(StorageFacing(sf[fam], vpc_id, v.vni, own[fam], router_mac, identity))

    hosts, vteps = _host_entries(c, vpc_id_of, {v.name: v.vni for v in c.vpcs}, core)
    return Tables(
        vtep=gw.vtep,
        compute_port=compute_port,
        ports=ports,
        vpcs=tuple(vpcs),
        vteps=vteps,
        routes=tuple(routes),
        groups=tuple(groups),
        nexthops=tuple(nexthops),
        storage_facing=tuple(sfs),
        hosts=hosts,
        **policy_fields(c),
    )
