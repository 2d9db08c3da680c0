"""The legacy gateway: the same job as the fast path, done the x86 kernel way.

Per VPC, a Linux VXLAN device (VNI of the VPC, local = anycast VTEP) terminates the tunnel. The
kernel has no VRF module here, so overlapping VPCs are kept apart with policy routing on marks:

- compute -> storage: the decapsulated packet enters on `vx-<vpc>`; an nftables rule in the raw
  prerouting hook rewrites the source 192.168.x.y -> storage-facing 100.64.x.y (bitwise, 1:1, no
  conntrack: `notrack`), and the main table routes it to the storage router.
- storage -> compute: a packet to the storage-facing prefix enters on `s0`; the same hook rewrites
  the destination back and sets the mark of the VPC; `ip rule fwmark M lookup M` sends it to a
  table whose only route is the VPC prefix on that VPC's VXLAN device; static neighbour and FDB
  entries (from the hosts list, like the fast path's host table) give the inner MAC and the host
  VTEP. The outer lookup of the VXLAN device inherits the mark, misses table M and falls through
  to main, which is what we want.

nftables' payload write fixes the IP and TCP/UDP checksums (pseudo-header) itself. The forward
chain accepts only VPC<->storage pairs of interfaces, so VPCs never reach each other or the
compute underlay; everything else is counted and dropped. It is a fair baseline: no conntrack, no
userspace, one nftables pass per packet, kernel GRO/GSO on every veth.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

from crosszone.linux.netns import Cmd, Executor, Op, in_ns
from crosszone_lab.emulate.frr import vtysh
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.emulate.topology import VXLAN_PORT, Gateway, Plan, router_mac, vxlan_name

__all__ = ["KIND", "VXLAN_PORT", "dropped_packets", "nft_ruleset", "plan_legacy", "policy_ops",
           "vxlan_name"]

TABLE_BASE = 1000  # routing table and fwmark of VPC number v: TABLE_BASE + v


def _policy_chain(family: str, p: Plan) -> list[str]:
    """The legacy gateway's best traffic policy: DSCP by the flow's bytes so far (conntrack).

    nftables can mark by a packet's length or by the byte counter of its conntrack entry; length
    says nothing about the flow (a bulk read's last segment and a metadata reply look alike), so
    the counter it is: a flow is small until its entry has counted `elephant_bytes`, then bulk,
    PIAS-like as in the fast path. The translation rewrites addresses before conntrack sees them,
    so the two directions of a connection are two entries, each counting its own direction
    (the fast path also keys its flow state by direction). Zones (one per VPC, set with the
    rewrite) keep the overlapping VPCs' replies apart. `ip dscp set` writes the six DSCP bits
    only (ECN kept) and fixes the IP checksum; the VXLAN device then copies nothing to the outer
    header, so the queues classify VXLAN frames by their inner DSCP.
    """
    pol = p.spec.policy
    dscp = "ip dscp" if family == "ip" else "ip6 dscp"
    return [
        "  chain gw_policy {",
        "    type filter hook forward priority mangle; policy accept;",
        f"    ct bytes < {pol.elephant_bytes} {dscp} set {pol.small_dscp}",
        f"    ct bytes >= {pol.elephant_bytes} {dscp} set {pol.bulk_dscp}",
        "  }",
    ]


def _to_storage(match: str, rewrite: str, track: str) -> list[str]:
    """The compute -> storage translation rule(s); with conntrack (`track` = `ct zone set`), a
    connection's opening SYN goes untracked. Conntrack sees only this direction of the
    connection (the reply's addresses are rewritten before it looks), so an entry made by the
    SYN would wait for a SYN-ACK forever and call every later packet of the direction invalid
    (no entry, no byte count, no mark); made by the first ACK instead (`tcp_loose` pickup), it
    is established and counts. The first rule rewrites the source, so the second no longer
    matches that packet."""
    rules = [f"    {match} {rewrite} {track}"]
    if track.startswith("ct "):
        rules.insert(0, f"    {match} tcp flags & (syn | ack) == syn {rewrite} notrack")
    return rules


def _table(family: str, pre: list[str], pairs: list[str], policy: list[str],
           accept: tuple[str, ...] = ()) -> list[str]:
    return [
        f"table {family} czgw",
        f"delete table {family} czgw",  # idempotent load: the first line creates it if absent
        f"table {family} czgw {{",
        "  counter dropped { }",
        "  counter forwarded { }",
        "  chain gw_prerouting {",
        # raw priority: before conntrack would look at it, so no per-flow state is ever made.
        "    type filter hook prerouting priority raw; policy accept;",
        *pre,
        "  }",
        "  chain gw_forward {",
        "    type filter hook forward priority filter; policy accept;",
        *accept,
        # what the gateway carries for the VPCs: everything forwarded but the routers' echoes
        '    counter name "forwarded"',
        "    iifname . oifname vmap { " + ", ".join(pairs) + " }",
        '    counter name "dropped" drop',
        "  }",
        *policy,
        "}",
    ]


def nft_ruleset(p: Plan) -> str:
    """The nftables ruleset of a legacy gateway (same on every legacy gateway).

    One `ip` table and, when a VPC has IPv6, one `ip6` table with the same rules: nftables'
    payload write of a 128-bit address fixes the TCP/UDP pseudo-header checksum too.
    """
    pre: list[str] = []
    pre6: list[str] = []
    pairs: list[str] = []
    pairs6: list[str] = []
    for v, vpc in enumerate(p.spec.vpcs, start=1):
        dev, mark = vxlan_name(vpc), TABLE_BASE + v
        # Without the policy no per-flow state is ever made; with it, conntrack counts bytes.
        notrack = f"ct zone set {v}" if p.spec.policy.enabled else "notrack"
        host = str(vpc.prefix.hostmask)
        pre += _to_storage(
            f'iifname "{dev}" ip saddr {vpc.prefix}',
            f"ip saddr set ip saddr & {host} | {vpc.storage_facing.network_address}", notrack)
        pre.append(
            f'    iifname "s0" ip daddr {vpc.storage_facing} '
            f"ip daddr set ip daddr & {host} | {vpc.prefix.network_address} "
            f"meta mark set {mark} {notrack}"
        )
        pairs += [f'"{dev}" . "s0" : accept', f'"s0" . "{dev}" : accept']
        if vpc.prefix6 is not None and vpc.storage_facing6 is not None:
            host6 = str(vpc.prefix6.hostmask)
            pre6 += _to_storage(
                f'iifname "{dev}" ip6 saddr {vpc.prefix6}',
                f"ip6 saddr set ip6 saddr & {host6} | {vpc.storage_facing6.network_address}",
                notrack)
            pre6.append(
                f'    iifname "s0" ip6 daddr {vpc.storage_facing6} ip6 daddr set ip6 daddr & '
                f"{host6} | {vpc.prefix6.network_address} meta mark set {mark} {notrack}"
            )
            pairs6 += [f'"{dev}" . "s0" : accept', f'"s0" . "{dev}" : accept']
    on = p.spec.policy.enabled
    # The routers' fast-reroute echoes cross every gateway between its two links.
    echo = ('    iifname . oifname { "c0" . "s0", "s0" . "c0" } '
            "icmp type { echo-request, echo-reply } accept",) if p.spec.fast_reroute.enabled else ()
    lines = _table("ip", pre, pairs, _policy_chain("ip", p) if on else [], echo)
    if pre6:
        lines += _table("ip6", pre6, pairs6, _policy_chain("ip6", p) if on else [])
    return "\n".join(lines + [""])


def plan_legacy(p: Plan, gw: Gateway) -> list[Op]:
    """Kernel datapath of one legacy gateway: VXLAN devices, policy routes, neighbours, nftables."""
    ns = gw.ns
    ops: list[Op] = []
    for v, vpc in enumerate(p.spec.vpcs, start=1):
        dev, table = vxlan_name(vpc), str(TABLE_BASE + v)
        ops += [
            in_ns(ns, "ip", "link", "del", dev, check=False),
            # nolearning: the host table is configuration, not learned from tunnel traffic, the
            # same as the fast path's host map. The MAC is the VPC's virtual router MAC, which
            # is the inner destination MAC the hosts send to and the source MAC of replies.
            in_ns(ns, "ip", "link", "add", dev, "address", router_mac(v), "mtu", str(p.inner_mtu),
                  "type", "vxlan", "id", str(vpc.vni), "local", str(p.spec.anycast_vtep),
                  "dstport", str(VXLAN_PORT), "nolearning"),
            in_ns(ns, "ip", "link", "set", dev, "up"),
            in_ns(ns, "ip", "route", "replace", str(vpc.prefix), "dev", dev, "table", table),
            in_ns(ns, "ip", "rule", "del", "pref", table, check=False),
            in_ns(ns, "ip", "rule", "add", "pref", table, "fwmark", table, "lookup", table),
        ]
        if vpc.prefix6 is not None:
            ops += [
                in_ns(ns, "ip", "-6", "route", "replace", str(vpc.prefix6), "dev", dev,
                      "table", table),
                in_ns(ns, "ip", "-6", "rule", "del", "pref", table, check=False),
                in_ns(ns, "ip", "-6", "rule", "add", "pref", table, "fwmark", table,
                      "lookup", table),
            ]
        for ep in (e for e in p.endpoints if e.vpc == vpc):
            host_vtep = p.hosts[ep.host - 1].vtep
            ops += [
                in_ns(ns, "bridge", "fdb", "append", ep.mac, "dev", dev, "dst", host_vtep),
                in_ns(ns, "ip", "neigh", "replace", ep.addr, "lladdr", ep.mac, "dev", dev,
                      "nud", "permanent"),
            ]
            if ep.addr6:
                ops.append(in_ns(ns, "ip", "-6", "neigh", "replace", ep.addr6, "lladdr", ep.mac,
                                 "dev", dev, "nud", "permanent"))
    ops += policy_ops(p, gw)
    return ops


def policy_ops(p: Plan, gw: Gateway) -> list[Op]:
    """(Re)load the ruleset of `gw`, with or without the traffic policy (`p.spec.policy`).

    With it, conntrack must count bytes (`nf_conntrack_acct`, per namespace) and must not
    judge the TCP windows of connections it sees one direction of (`tcp_be_liberal`): a packet
    it calls invalid has no entry, so no byte count, and would go unmarked."""
    ops: list[Op] = []
    if p.spec.policy.enabled:
        ops += [in_ns(gw.ns, "sysctl", "-qw", "net.netfilter.nf_conntrack_acct=1"),
                in_ns(gw.ns, "sysctl", "-qw", "net.netfilter.nf_conntrack_tcp_be_liberal=1")]
    ops.append(in_ns(gw.ns, "nft", "-f", "-", stdin=nft_ruleset(p)))
    return ops


def nft_counter(nft_json: str, name: str, field: str = "packets") -> int:
    """Packets (or `field` bytes) of the czgw counters called `name` (every table), from
    `nft -j list counters`.

    Raises DeployError when the output is not nftables JSON or holds no such counter (the
    gateway's table is missing): a failed read must never count as zero."""
    try:
        data = json.loads(nft_json)
        items = data["nftables"]
        counters = [item["counter"] for item in items
                    if isinstance(item, dict) and isinstance(item.get("counter"), dict)]
        ours = [c for c in counters if c.get("table") == "czgw" and c.get("name") == name]
        total = sum(int(c[field]) for c in ours)
    except (json.JSONDecodeError, TypeError, KeyError, ValueError) as exc:
        raise DeployError(f"nftables counters: unreadable ({exc!r}): {nft_json[:80]!r}") from None
    if not ours:
        raise DeployError(f"nftables counters: no czgw `{name}` counter (table not loaded?)")
    return total


def dropped_packets(nft_json: str) -> int:
    """Packets counted by the `dropped` counters (nft_counter)."""
    return nft_counter(nft_json, "dropped")


def forwarded_packets(nft_json: str) -> int:
    """Packets the gateway forwarded for the VPCs, both families: the `forwarded` counters,
    which the routers' fast-reroute echoes (accepted before them) never reach. The kernel's
    ForwDatagrams counts those echoes too: 800 a second per gateway, which a drain would read
    as traffic that never stops."""
    return nft_counter(nft_json, "forwarded")


def forwarded_bytes(nft_json: str) -> int:
    """Bytes of the `forwarded` counters (IP packets as forwarded: GRO-merged ones whole)."""
    return nft_counter(nft_json, "forwarded", "bytes")


class LegacyGateway:
    """The kernel path as a gateway kind (kinds.GatewayKind): configured, never attached."""

    name = "legacy"
    letter = "l"
    attaches = False  # the kernel path works as soon as it is configured: it announces at once
    default_count = 2

    def configure(self, p: Plan, gw: Gateway) -> list[Op]:
        """VXLAN devices, policy routes, neighbours, nftables (plan_legacy)."""
        return plan_legacy(p, gw)

    def available(self) -> bool:
        """Always: it needs only the kernel and nft."""
        return True

    def attach(self, ex: Executor, p: Plan, gw: Gateway) -> None:
        """Nothing to attach: configure did it all."""

    def detach(self, ns: str, pin_dir: Path) -> list[Op]:
        """Nothing to undo beyond deleting the namespace."""
        return []

    def drops(self, ex: Executor, gw: Gateway) -> dict[str, int]:
        """The nftables `dropped` counters of `gw`."""
        out = ex.output(["ip", "netns", "exec", gw.ns, "nft", "-j", "list", "counters"])
        return {"nftables": dropped_packets(out)}


KIND = LegacyGateway()


#: Administrative distance of the careful operator's floating static routes: BGP's routes
#: (eBGP, 20) win whenever they are there.
FLOATING_DISTANCE = 250


def floating_route_ops(p: Plan, gw: Gateway, on: bool) -> list[Op]:
    """The careful operator's legacy gateway: floating static routes (staticd, distance 250) to
    what it forwards to (every host's VTEP subnet via the compute router, the storage subnets
    via the storage router), so that a gateway whose link comes back forwards at once instead of
    dropping until BGP has taught it those routes again. They go through FRR, not `ip route`:
    zebra takes a kernel route it did not make as distance 0, prefers it to BGP's, and does not
    put BGP's back when the kernel route goes (kernel routes with metric 250 leave the legacy
    gateways without routes). Measured by `bench failover --kinds legacy-careful`."""
    s = p.spec.storage
    routes = [f"ip route {ipaddress.ip_interface(f'{h.vtep}/24').network} {gw.compute_peer}"
              for h in p.hosts]
    routes.append(f"ip route {s.subnet} {gw.storage_peer}")
    if gw.storage_peer6:
        routes.append(f"ipv6 route {s.subnet6} {gw.storage_peer6}")
    no = "" if on else "no "
    cmd = vtysh(gw.ns, "configure terminal",
                *[f"{no}{r} {FLOATING_DISTANCE}" for r in routes], "end")
    return [Cmd(cmd.argv, check=on)]
