"""Typed, frozen schema of the intent file (format version 1, see docs/intent.md).

Field-level checks live here (types, ranges, address syntax, unknown keys); everything that
relates one object to another lives in `crosszone.intent.validate`, in one place.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

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


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Interface(_Model):
    """A gateway port."""

    name: IfName
    role: Literal["compute", "storage"]
    mac: Mac
    next_hop_mac: Mac | None = None


class Gateway(_Model):
    """The gateway this intent programs."""

    name: Name
    vtep: IPv4
    interfaces: list[Interface] = Field(min_length=1)


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


class StoragePool(_Model):
    """Storage prefixes and the ECMP group of next hops that reaches them."""

    name: Name
    prefixes: list[Network] = Field(min_length=1)
    next_hops: list[NextHop] = Field(min_length=1)


class Intent(_Model):
    """The whole intent file."""

    version: Literal[1]
    gateway: Gateway
    vpcs: list[Vpc] = Field(min_length=1)
    hosts: list[Host] = []
    storage_pools: list[StoragePool] = []
