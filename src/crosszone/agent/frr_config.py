"""The gateway's FRR configuration, rendered from the intent: pure, no I/O.

`render(cluster, gateway, state)` turns the gateway's `bgp:` entry (ASN, router id, peers and
their roles, BFD on/off and timers) and the VPCs it serves into one integrated FRR
configuration (zebra/staticd, bgpd, bfdd) that `frr_apply` hands to FRR's own tools. It is the
product's version of what the emulator writes for a crosszone gateway (emulate/frr.py), with
the same behaviour:

- the anycast VTEP (/32) goes to the compute-zone router, the storage-facing prefixes of every
  VPC (both families; each IPv6 one with its two halves, below) to the storage-zone router,
  through `network` statements and outbound route-maps that send nothing else (a gateway is
  never a transit path between the zones);
- each storage-facing prefix has an interface route on the compute link (staticd), so BGP's
  import check announces it only while that link is up: a gateway that cannot deliver replies
  into the compute zone stops attracting them;
- sessions retry a refused connection after 1 s (`timers connect 1`, FRR waits 10 s otherwise)
  and carry BFD with the intent's timers (profile `crosszone`);
- `frr defaults datacenter`: 3 s keepalive, 9 s hold, no advertisement delay.

`RoutingState` is what a migration changes on one gateway (deliverable 2 of issue 23 writes it
to the store): the link-bandwidth weight its routes carry, graceful shutdown, the canary VPCs
on, off or alone, or everything withdrawn. `programmed` names the VPCs whose maps are
programmed: only their prefixes are announced (make-before-break, `routing_owner`).

Everything the applier compares is deterministic: the same inputs give the same text, and a
change of one VPC changes only its lines (prefix-list sequence numbers derive from the prefix,
not from its position, so adding a VPC does not renumber the others).
"""

from __future__ import annotations

import ipaddress
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from crosszone.intent.schema import Cluster, Gateway, Vpc

Net = ipaddress.IPv4Network | ipaddress.IPv6Network

BFD_PROFILE = "crosszone"
#: FRR accepts 1..25600 Mbps of link bandwidth per path.
MAX_BANDWIDTH = 25600
ROUTE_MAPS = {"compute": "CZ-TO-COMPUTE", "storage": "CZ-TO-STORAGE", None: "CZ-TO-ZONES"}


class RenderError(ValueError):
    """The intent and state cannot make a configuration (the message says why)."""


@dataclass(frozen=True)
class RoutingState:
    """What one gateway announces and how (the migration's per-gateway routing state).

    canary: "on" announces the canary VPCs like the others; "off" leaves them out (a source
    gateway once the canary moved); "only" announces just them, without the anycast VTEP or
    any other VPC (a target gateway during the canary phase). withdraw: announce nothing
    (sessions and BFD stay up). shutdown: every neighbour shut (the fast path is gone).
    bandwidth_mbps: the link-bandwidth extended community on every announced route (None:
    none, plain ECMP at the routers). graceful_shutdown: RFC 8326's community on every route,
    so the routers keep them only as backup."""

    withdraw: bool = False
    canary: Literal["on", "off", "only"] = "on"
    canary_vpcs: frozenset[str] = frozenset()
    bandwidth_mbps: int | None = None
    graceful_shutdown: bool = False
    #: every BGP neighbour shut (`neighbor X shutdown`): the fast path failed closed
    #: (routing_owner.fail_closed); the routers drop every path via this gateway at once
    shutdown: bool = False

    def check(self) -> None:
        """RenderError when the state is not one FRR can take."""
        bw = self.bandwidth_mbps
        if bw is not None and not 1 <= bw <= MAX_BANDWIDTH:
            raise RenderError(f"link bandwidth {bw} Mbps is outside 1..{MAX_BANDWIDTH}")
        if self.canary == "only" and not self.canary_vpcs:
            raise RenderError("canary 'only' needs at least one canary VPC")


@dataclass(frozen=True)
class Rendered:
    """A rendered configuration and what it announces."""

    config: str
    announced: tuple[str, ...]          # every prefix with a `network` statement, sorted
    state: RoutingState = field(default_factory=RoutingState)


def facing_prefixes(vpc: Vpc) -> list[Net]:
    """The VPC's storage-facing prefixes (its own prefixes when it uses identity)."""
    return list(vpc.prefixes if vpc.storage_facing == "identity" else vpc.storage_facing)


def with_halves(nets: Iterable[Net]) -> list[Net]:
    """Each IPv6 prefix followed by its two halves.

    The routers weigh gateways by multipath routes without kernel nexthop groups, and zebra 8.4
    replaces an IPv6 multipath route by a delete and an add ~70 us apart: a reply arriving in
    between had no route. zebra replaces routes one after the other, so while the prefix or a
    half is being replaced the other covers the address. IPv4 replaces are atomic."""
    out: list[Net] = []
    for n in nets:
        out.append(n)
        if n.version == 6 and n.prefixlen < 128:
            out += list(n.subnets(prefixlen_diff=1))
    return out


def served_vpcs(cluster: Cluster, gateway: str) -> list[Vpc]:
    """The VPCs the gateway serves: every VPC of the cluster (any gateway forwards any packet,
    which is what lets the routers spread traffic over them)."""
    cluster.gateway(gateway)  # KeyError for an unknown gateway
    return list(cluster.vpcs)


def _seq(prefix: str, taken: set[int]) -> int:
    """A prefix-list sequence number that depends on the prefix alone (a collision takes the
    next free number, in the caller's sorted order, so the result is still deterministic)."""
    n = zlib.crc32(prefix.encode()) % 4_000_000_000 + 1
    while n in taken:
        n += 1
    taken.add(n)
    return n


def _prefix_list(name: str, v6: bool, prefixes: list[str]) -> list[str]:
    taken: set[int] = set()
    kw = "ipv6" if v6 else "ip"
    lines = [f"{kw} prefix-list {name} seq {_seq(p, taken)} permit {p}" for p in sorted(prefixes)]
    return sorted(lines, key=lambda s: int(s.split(" seq ")[1].split()[0]))


def render(cluster: Cluster, gateway: str, state: RoutingState | None = None,
           programmed: Iterable[str] | None = None, hostname: str | None = None,
           log_file: str | None = None, ipv6_halves: bool = True) -> Rendered | None:
    """The gateway's FRR configuration, or None when its intent has no `bgp:` (the operator
    runs routing). programmed: names of the VPCs whose maps are programmed (None: all)."""
    state = state or RoutingState()
    state.check()
    gw = cluster.gateway(gateway)
    if gw.bgp is None:
        return None
    vpcs = served_vpcs(cluster, gateway)
    names = {v.name for v in vpcs}
    unknown = sorted(state.canary_vpcs - names)
    if unknown:
        raise RenderError(f"canary VPC {', '.join(unknown)} is not in the intent")
    ready = names if programmed is None else names & set(programmed)

    def halves(nets: Iterable[Net]) -> list[Net]:
        return with_halves(nets) if ipv6_halves else list(nets)

    facing = {v.name: halves(facing_prefixes(v)) for v in vpcs}
    anycast = f"{gw.vtep}/32"
    announce_facing: list[Net] = []
    announce_anycast = not state.withdraw and state.canary != "only"
    if not state.withdraw:
        for v in vpcs:
            canary = v.name in state.canary_vpcs
            if v.name not in ready or (state.canary == "off" and canary) or (
                    state.canary == "only" and not canary):
                continue
            announce_facing += facing[v.name]
    all_facing = [n for v in vpcs for n in facing[v.name]]
    lines = _head(gw, hostname, log_file)
    lines += _anchors(gw, all_facing)
    lines += _bgp(gw, anycast if announce_anycast else None, announce_facing,
                  any(n.version == 6 for n in all_facing), state)
    lines += _policy(anycast, all_facing, state, {p.role for p in gw.bgp.peers})
    lines += _bfd(gw)
    lines += ["end", ""]
    announced = ([anycast] if announce_anycast else []) + [str(n) for n in announce_facing]
    return Rendered("\n".join(lines), tuple(sorted(announced)), state)


def _head(gw: Gateway, hostname: str | None, log_file: str | None) -> list[str]:
    lines = ["frr defaults datacenter", f"hostname {hostname or gw.name}"]
    if log_file:
        lines.append(f"log file {log_file} informational")
    # microseconds: failover timelines put FRR's lines next to netlink events. No `service
    # integrated-vtysh-config`: that is vtysh.conf's (frr-reload.py neither adds nor removes it)
    return lines + ["log timestamp precision 6", "!"]


def _compute_interface(gw: Gateway) -> str | None:
    return next((i.name for i in gw.interfaces if i.role == "compute"), None)


def _anchors(gw: Gateway, facing: list[Net]) -> list[str]:
    """Interface routes of the storage-facing prefixes on the compute link (see the module
    docstring). They change nothing in forwarding: the fast path answers those addresses
    before the kernel routes anything."""
    dev = _compute_interface(gw)
    if dev is None or not facing:
        return []
    return [f"{'ipv6' if n.version == 6 else 'ip'} route {n} {dev}" for n in facing] + ["!"]


def _bgp(gw: Gateway, anycast: str | None, facing: list[Net], has_v6: bool,
         state: RoutingState) -> list[str]:
    bgp = gw.bgp
    assert bgp is not None
    bfd = bgp.bfd_timers() is not None
    # No `bgp ebgp-requires-policy` line: off under the datacenter defaults (FRR would not
    # show the line, so writing it would make every comparison differ). The outbound
    # route-maps are the policy; inbound the gateway takes what the routers send.
    lines = [f"router bgp {bgp.asn}", f" bgp router-id {bgp.router_id}"]
    if state.graceful_shutdown:
        lines.append(" bgp graceful-shutdown")
    for p in bgp.peers:
        lines += [f" neighbor {p.address} remote-as {p.asn}",
                  # retry a refused connection after 1 s, not FRR's 10 s: the normal case
                  # when the router's bgpd is not listening yet
                  f" neighbor {p.address} timers connect 1"]
        if bfd:
            # FRR shows both lines for a profile: writing both keeps the comparison equal
            lines += [f" neighbor {p.address} bfd",
                      f" neighbor {p.address} bfd profile {BFD_PROFILE}"]
        if state.shutdown:
            lines.append(f" neighbor {p.address} shutdown")
    v4 = ([anycast] if anycast else []) + [str(n) for n in facing if n.version == 4]
    lines += [" !", " address-family ipv4 unicast"]
    lines += [f"  network {n}" for n in v4]
    for p in bgp.peers:
        lines.append(f"  neighbor {p.address} route-map {ROUTE_MAPS[p.role]} out")
    lines.append(" exit-address-family")
    v6_peers = [p for p in bgp.peers if p.role != "compute"]
    if has_v6 and v6_peers:
        # IPv6 routes ride the IPv4 sessions: bgpd sends the session interface's global
        # IPv6 address as next hop
        lines += [" !", " address-family ipv6 unicast"]
        lines += [f"  network {n}" for n in facing if n.version == 6]
        for p in v6_peers:
            lines += [f"  neighbor {p.address} activate",
                      f"  neighbor {p.address} route-map {ROUTE_MAPS[p.role]} out"]
        lines.append(" exit-address-family")
    return lines + ["exit", "!"]


def _policy(anycast: str, facing: list[Net], state: RoutingState,
            roles: set[Literal["compute", "storage"] | None]) -> list[str]:
    """Prefix lists of everything the gateway may announce (the intent's, whatever the state:
    a state change then touches only `network` and `set` lines) and the outbound route-maps."""
    v4 = [str(n) for n in facing if n.version == 4]
    v6 = [str(n) for n in facing if n.version == 6]
    lines = _prefix_list("CZ-ANYCAST", False, [anycast])
    if v4:
        lines += _prefix_list("CZ-FACING", False, v4)
    if v6:
        lines += _prefix_list("CZ-FACING6", True, v6)
    lines.append("!")
    sets = ([f" set extcommunity bandwidth {state.bandwidth_mbps}"]
            if state.bandwidth_mbps is not None else [])
    matches = {"anycast": " match ip address prefix-list CZ-ANYCAST",
               "facing": " match ip address prefix-list CZ-FACING",
               "facing6": " match ipv6 address prefix-list CZ-FACING6"}
    present = {"anycast": True, "facing": bool(v4), "facing6": bool(v6)}
    for role, kinds in (("compute", ["anycast"]), ("storage", ["facing", "facing6"]),
                        (None, ["anycast", "facing", "facing6"])):
        if role not in roles:
            continue
        for n, kind in enumerate(kinds, start=1):
            if not present[kind]:
                continue
            lines += [f"route-map {ROUTE_MAPS[role]} permit {10 * n}", matches[kind], *sets,
                      "exit", "!"]
    return lines


def _bfd(gw: Gateway) -> list[str]:
    assert gw.bgp is not None
    timers = gw.bgp.bfd_timers()
    if timers is None:
        return []
    return ["bfd", f" profile {BFD_PROFILE}",
            f"  detect-multiplier {timers.multiplier}",
            f"  receive-interval {timers.interval_ms}",
            f"  transmit-interval {timers.interval_ms}",
            " exit", "exit", "!"]
