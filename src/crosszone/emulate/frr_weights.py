"""How a migration weighs gateways at the routers: BGP link bandwidth and backup paths, inbound.

Each router applies one inbound route-map per gateway session (`FROM-<GATEWAY>`, empty until a
migration writes it) and keeps what each gateway sent (`soft-reconfiguration inbound`). A
migration step rewrites every gateway's route-map on both routers and re-runs the inbound policy
over the stored routes (`clear ... soft in`):

- a gateway with a share gets the BGP link-bandwidth extended community (RFC 10005) with its
  share; FRR's multipath turns the values into kernel next-hop weights;
- a gateway kept as a backup gets a lower local preference: its paths stay in BGP (and take the
  traffic back at once if the others go) but are not in the multipath set.

Why at the routers and not on the gateways' outbound route-maps (the first version): a gateway
re-sends its routes after `clear ... soft out` only when FRR's announce timer fires, 100 ms for a
session alone in its update group (`BGP_ANNOUNCE_ROUTE_SHORT_DELAY_MS`), and the router then
holds the update 50 ms in bgpd's work queue (hold 50) and 10 ms in zebra's (`show work-queues`).
Steps converged in 152 to 197 ms that way. Re-running stored routes at the routers skips the
gateway's timer and the round trip: what is left is the routers' own two queues. The gateways
still drain with the graceful-shutdown community (RFC 8326) before they are withdrawn.
"""

from __future__ import annotations

#: Link-bandwidth units per percent of traffic: FRR takes 1..25600 Mbps per path and weighs
#: each next hop by its share of the total, so 100 % spread over up to 8 gateways of a kind
#: stays an integer >= 1 per gateway.
BW_PER_PERCENT = 200
#: Local preference of a gateway the routers keep as a backup (FRR's default is 100): lower than
#: the others', above the 0 a graceful-shutdown community gives.
BACKUP_LOCAL_PREF = 50


def link_bandwidth(percent: float, gateways: int) -> int:
    """The link-bandwidth value (Mbps) each of `gateways` gateways gets to carry `percent` of
    the traffic between them."""
    return max(1, min(25600, round(percent * BW_PER_PERCENT / max(1, gateways))))


def route_map(gateway: str) -> str:
    """The routers' inbound route-map of one gateway's session."""
    return f"FROM-{gateway.upper()}"


def inbound_config(peers: dict[str, str], v6: bool) -> tuple[list[str], list[str], list[str]]:
    """Router config for `peers` (gateway name -> session address): the IPv4 and IPv6
    address-family lines, and the (empty) route-maps."""
    af4 = [line for name, addr in peers.items() for line in (
        f"  neighbor {addr} soft-reconfiguration inbound",
        f"  neighbor {addr} route-map {route_map(name)} in")]
    af6 = af4 if v6 else []
    maps = [line for name in peers for line in (f"route-map {route_map(name)} permit 10",
                                                "exit", "!")]
    return af4, af6, maps


def policy_commands(policy: dict[str, tuple[int | None, bool]], v6: bool) -> list[str]:
    """bgpd commands for one router: per gateway name, (link bandwidth or None, backup), then
    the stored routes through the new policy (both families where the router has IPv6)."""
    cmds = ["configure terminal"]
    for name, (bandwidth, backup) in sorted(policy.items()):
        cmds += [f"route-map {route_map(name)} permit 10",
                 f"set extcommunity bandwidth {bandwidth}" if bandwidth
                 else "no set extcommunity bandwidth",
                 f"set local-preference {BACKUP_LOCAL_PREF}" if backup
                 else "no set local-preference",
                 "exit"]
    cmds += ["end", "clear bgp ipv4 unicast * soft in"]
    if v6:
        cmds.append("clear bgp ipv6 unicast * soft in")
    return cmds


def step_policy(source: list[str], target: list[str], weight_new: int
                ) -> dict[str, tuple[int | None, bool]]:
    """Every gateway's (bandwidth, backup) for `weight_new` percent on the target gateways:
    0 and 100 are one kind alone with the other as backup, in between both kinds weighted."""
    if weight_new <= 0:
        return {**dict.fromkeys(source, (None, False)), **dict.fromkeys(target, (None, True))}
    if weight_new >= 100:
        return {**dict.fromkeys(source, (None, True)), **dict.fromkeys(target, (None, False))}
    return {**dict.fromkeys(source, (link_bandwidth(100 - weight_new, len(source)), False)),
            **dict.fromkeys(target, (link_bandwidth(weight_new, len(target)), False))}


def plain_policy(gateways: list[str]) -> dict[str, tuple[int | None, bool]]:
    """No weights and no backups: plain ECMP over whatever is announced."""
    return dict.fromkeys(gateways, (None, False))


def drain_commands(gateway_as: int, drain: bool) -> list[str]:
    """bgpd commands for a gateway: announce with the graceful-shutdown community (RFC 8326) or
    without. FRR re-sends its routes itself when the setting changes, and does nothing when it
    is already so."""
    return ["configure terminal", f"router bgp {gateway_as}",
            "bgp graceful-shutdown" if drain else "no bgp graceful-shutdown", "end"]
