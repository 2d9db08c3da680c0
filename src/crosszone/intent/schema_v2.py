"""Typed, frozen schema of the cluster intent (format version 2, see docs/control.md).

Version 2 grows version 1 from one gateway to a cluster: several gateways (each with its
interfaces, the shared anycast VTEP and its BGP session data), a traffic policy, and storage pools
whose prefixes may be given as a compact block (one string, parsed with numpy) so that a million
routes load in well under a second; hosts likewise (`hosts_compact`, one line per host, see
`crosszone.intent.hosts`), next to or instead of the verbose `hosts` list. VPCs, hosts, routes
and next hops keep their version-1 models.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from crosszone.intent.hosts import HostError, HostSet, parse_hosts
from crosszone.intent.prefixes import PrefixError, PrefixSet, parse_block
from crosszone.intent.schema import Address, Host, Interface, IPv4, Name, NextHop, Vpc, _network


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


class BgpPeer(_Model):
    """A zone router the gateway peers with."""

    address: Address
    asn: int = Field(ge=1, le=0xFFFFFFFF)


class Bgp(_Model):
    """BGP of one gateway: it announces the anycast VTEP and the storage-facing prefixes."""

    asn: int = Field(ge=1, le=0xFFFFFFFF)
    router_id: IPv4
    peers: list[BgpPeer] = []
    bfd: bool = True


class GatewayV2(_Model):
    """One gateway of the cluster."""

    name: Name
    vtep: IPv4
    interfaces: list[Interface] = Field(min_length=1)
    bgp: Bgp | None = None


class StoragePoolV2(_Model):
    """Storage prefixes (a list or a compact block) and the ECMP group that reaches them."""

    name: Name
    prefixes: PrefixBlock
    next_hops: list[NextHop] = Field(min_length=1)


class Policy(_Model):
    """Traffic policy: large flows must not congest, small requests must not wait behind them."""

    elephant_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    small_dscp: int = Field(default=46, ge=0, le=63)
    bulk_dscp: int = Field(default=10, ge=0, le=63)
    flowlet_gap_us: int = Field(default=500, ge=1, le=1_000_000)


class Cluster(_Model):
    """The whole version-2 intent."""

    version: Literal[2]
    gateways: list[GatewayV2] = Field(min_length=1)
    vpcs: list[Vpc] = Field(min_length=1)
    hosts: list[Host] = []
    hosts_compact: HostBlock = HostSet.empty()
    storage_pools: list[StoragePoolV2] = []
    policy: Policy = Policy()

    def gateway(self, name: str) -> GatewayV2:
        """The gateway with this name (KeyError if none)."""
        for gw in self.gateways:
            if gw.name == name:
                return gw
        raise KeyError(name)
