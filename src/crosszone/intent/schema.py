"""Typed, frozen schema of the intent: the cluster (format version 2, see docs/control.md).

The one intent model in memory. A version-1 file (one gateway, docs/intent.md) is migrated to a
version-2 document when it is read (`crosszone.intent.cluster`) and validated by this schema.

Field-level checks live here (types, ranges, address syntax, unknown keys); everything that
relates one object to another lives in `crosszone.intent.checks`, in one place. Storage pools'
prefixes may be given as a compact block (one string, parsed with numpy) so that a million
routes load in well under a second; hosts likewise (`hosts_compact`, one line per host, see
`crosszone.intent.hosts`), next to or instead of the verbose `hosts` list.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from crosszone.intent.hosts import HostError, HostSet, parse_hosts
from crosszone.intent.prefixes import PrefixError, PrefixSet, parse_block

_MAC_RE = re.compile(r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$")
# Dotted quad without leading zeros (what ipaddress accepts): parsed here in ~1 us instead of
# ipaddress's ~20 us per string, which is most of validating 100k hosts.
_OCTET = r"(0|[1-9][0-9]{0,2})"
_V4 = re.compile(r"\.".join([_OCTET] * 4))

Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")]
IfName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.@-]{1,15}$")]


def _mac(value: object) -> str:
    if not isinstance(value, str) or not _MAC_RE.match(value.lower()):
        raise ValueError(f"{value!r} is not a MAC address like 02:00:00:00:00:01")
    return value.lower()


def _network(value: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a prefix like 10.0.0.0/8")
    try:
        return ipaddress.ip_network(value, strict=True)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a valid prefix ({exc})") from None


def _v4_of_int(value: int) -> ipaddress.IPv4Address:
    """IPv4Address of an int known to be in range, without __init__'s checks (5 us of 6)."""
    addr = ipaddress.IPv4Address.__new__(ipaddress.IPv4Address)
    addr._ip = value  # type: ignore[attr-defined]
    return addr


def _address(value: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not an IP address")
    m = _V4.fullmatch(value)
    if m is not None:
        a, b, c, d = map(int, m.groups())
        if a < 256 and b < 256 and c < 256 and d < 256:
            return _v4_of_int((a << 24) | (b << 16) | (c << 8) | d)
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IP address") from None


def _ipv4(value: object) -> ipaddress.IPv4Address:
    addr = _address(value)
    if not isinstance(addr, ipaddress.IPv4Address):
        raise ValueError(f"{value!r} is not an IPv4 address (the underlay is IPv4)")
    return addr


Mac = Annotated[str, BeforeValidator(_mac)]
Network = Annotated[ipaddress.IPv4Network | ipaddress.IPv6Network, BeforeValidator(_network)]
Address = Annotated[ipaddress.IPv4Address | ipaddress.IPv6Address, BeforeValidator(_address)]
IPv4 = Annotated[ipaddress.IPv4Address, BeforeValidator(_ipv4)]


def _prefix_block(value: object) -> PrefixSet:
    """A list of prefixes or one whitespace-separated string of them -> PrefixSet."""
    if isinstance(value, PrefixSet):
        return value
    if isinstance(value, str):
        try:
            out = parse_block(value)
        except PrefixError as exc:
            raise ValueError(str(exc)) from None
    elif isinstance(value, list):
        nets = []
        for i, item in enumerate(value):
            try:
                nets.append(_network(item))
            except ValueError as exc:
                raise ValueError(f"prefix #{i}: {exc}") from None
        out = PrefixSet.from_networks(nets)
    else:
        raise ValueError("prefixes must be a list of prefixes or one string of them")
    if len(out) == 0:
        raise ValueError("at least one prefix is needed")
    return out


PrefixBlock = Annotated[PrefixSet, BeforeValidator(_prefix_block)]


def _host_block(value: object) -> HostSet:
    """One string of host lines ('name vpc vtep mac addr[,addr]') -> HostSet."""
    if isinstance(value, HostSet):
        return value
    if not isinstance(value, str):
        raise ValueError("hosts_compact must be one string of lines 'name vpc vtep mac "
                         "addr[,addr]'")
    try:
        return parse_hosts(value)
    except HostError as exc:
        raise ValueError(str(exc)) from None


HostBlock = Annotated[HostSet, BeforeValidator(_host_block)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True,
                              arbitrary_types_allowed=True)


class Interface(_Model):
    """A gateway port."""

    name: IfName
    role: Literal["compute", "storage"]
    mac: Mac
    next_hop_mac: Mac | None = None


class Route(_Model):
    """An explicit route of a VPC."""

    prefix: Network
    action: Literal["forward", "drop", "slowpath"]
    pool: Name | None = None


class Vpc(_Model):
    """A tenant network: one VNI, its address space and its storage-facing prefix."""

    name: Name
    vni: int = Field(ge=1, le=0xFFFFFF)
    prefixes: list[Network] = Field(min_length=1, max_length=2)
    storage_facing: list[Network] | Literal["identity"]
    router_mac: Mac
    storage_pools: list[Name] = []
    routes: list[Route] = []
    # Per-tenant fairness: the VPC's inner IP traffic is held to this rate in each direction by
    # a token bucket in the fast path (None: no limit); burst_kib is the bucket's depth.
    rate_mbps: int | None = Field(default=None, ge=1, le=100_000_000)
    burst_kib: int = Field(default=1024, ge=16, le=1 << 22)


class Host(_Model):
    """A GPU host's endpoint in one VPC."""

    name: Name
    vpc: Name
    vtep: IPv4
    addresses: list[Address] = Field(min_length=1)
    mac: Mac


class NextHop(_Model):
    """A storage-zone next hop (router or node) reached through one of the gateway's ports."""

    name: Name
    interface: IfName
    mac: Mac


class BgpPeer(_Model):
    """A zone router the gateway peers with.

    role says what the gateway announces to it: the anycast VTEP to the compute zone's router,
    the storage-facing prefixes to the storage zone's; none: both (one router for both zones)."""

    address: Address
    asn: int = Field(ge=1, le=0xFFFFFFFF)
    role: Literal["compute", "storage"] | None = None


class Bfd(_Model):
    """BFD timers of a gateway's sessions (FRR profile): a session is down after
    `multiplier` intervals without a packet."""

    interval_ms: int = Field(default=100, ge=10, le=60_000)
    multiplier: int = Field(default=5, ge=2, le=255)


class Bgp(_Model):
    """BGP of one gateway: it announces the anycast VTEP and the storage-facing prefixes.

    bfd: true (the default timers), false (no BFD) or the timers."""

    asn: int = Field(ge=1, le=0xFFFFFFFF)
    router_id: IPv4
    peers: list[BgpPeer] = []
    bfd: bool | Bfd = True

    def bfd_timers(self) -> Bfd | None:
        """The BFD timers in force, None when BFD is off."""
        if self.bfd is False:
            return None
        return Bfd() if self.bfd is True else self.bfd


class Gateway(_Model):
    """One gateway of the cluster."""

    name: Name
    vtep: IPv4
    interfaces: list[Interface] = Field(min_length=1)
    bgp: Bgp | None = None


class StoragePool(_Model):
    """Storage prefixes (a list or a compact block) and the ECMP group that reaches them."""

    name: Name
    prefixes: PrefixBlock
    next_hops: list[NextHop] = Field(min_length=1)


class Policy(_Model):
    """Traffic policy: large flows must not congest, small requests must not wait behind them.

    Off unless enabled, so that an intent written before the fast path acted on it forwards
    packets unchanged."""

    enabled: bool = False
    elephant_bytes: int = Field(default=10 * 1024 * 1024, ge=1, le=1 << 50)
    small_dscp: int = Field(default=46, ge=0, le=63)
    bulk_dscp: int = Field(default=10, ge=0, le=63)
    flowlet_gap_us: int = Field(default=500, ge=1, le=1_000_000)
    flow_idle_ms: int = Field(default=2000, ge=1, le=3_600_000)


class Cluster(_Model):
    """The whole intent (version 2; a version-1 file is migrated to it when read)."""

    version: Literal[2]
    gateways: list[Gateway] = Field(min_length=1)
    vpcs: list[Vpc] = Field(min_length=1)
    hosts: list[Host] = []
    hosts_compact: HostBlock = HostSet.empty()
    storage_pools: list[StoragePool] = []
    policy: Policy = Policy()

    def gateway(self, name: str) -> Gateway:
        """The gateway with this name (KeyError if none)."""
        for gw in self.gateways:
            if gw.name == name:
                return gw
        raise KeyError(name)
