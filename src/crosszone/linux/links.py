"""Veth plumbing between network namespaces: pairs, addresses, and NIC-like offload settings.

The settings below are the emulator's (and apply to both gateway kinds alike): they make veth
ends behave like the NIC ports and wires they stand in for. Everything is returned as planned
`Cmd`s (netns.py) for an Executor to run.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from crosszone.linux.netns import Cmd, Op, cmd, in_ns


@dataclass(frozen=True)
class Link:
    """One veth pair: (namespace, name, mac, address/len) on each side."""

    a_ns: str
    a_name: str
    a_mac: str
    a_addr: str | None
    b_ns: str
    b_name: str
    b_mac: str
    b_addr: str | None
    mtu: int
    a_addr6: str | None = None
    b_addr6: str | None = None


def plan_link(link: Link) -> list[Op]:
    """Create one veth pair directly in its two namespaces, with fixed MACs, MTU and addresses."""
    ops: list[Op] = [
        # Deleting first makes `up` idempotent: a half-made pair from a crash is rebuilt.
        in_ns(link.a_ns, "ip", "link", "del", link.a_name, check=False),
        cmd("ip", "link", "add", "name", link.a_name, "netns", link.a_ns,
            "address", link.a_mac, "mtu", str(link.mtu), "type", "veth",
            "peer", "name", link.b_name, "netns", link.b_ns,
            "address", link.b_mac, "mtu", str(link.mtu)),
    ]
    for ns, name, addr, addr6 in ((link.a_ns, link.a_name, link.a_addr, link.a_addr6),
                                  (link.b_ns, link.b_name, link.b_addr, link.b_addr6)):
        if addr:
            ops.append(in_ns(ns, "ip", "addr", "add", addr, "dev", name))
        if addr6:
            # nodad: the plan guarantees uniqueness, and DAD would delay the address by a
            # second and send neighbour solicitations for nothing.
            ops.append(in_ns(ns, "ip", "-6", "addr", "add", addr6, "dev", name, "nodad"))
        ops += nic_like(ns, name)
        ops.append(in_ns(ns, "ip", "link", "set", name, "up"))
    return ops


def nic_like(ns: str, dev: str) -> list[Cmd]:
    """Make a veth end behave like a NIC port: GRO on receive, a queue on transmit.

    A plain veth hands every packet to the per-CPU backlog (1000 packets shared by all devices
    on that CPU) and drops when it is full: under TCP bursts that is thousands of drops a second
    anywhere in the emulation, and the XDP path, which redirects in bursts, suffers most. With
    GRO on, the veth receives in NAPI context from a 256-entry ring, and since Linux 6.16 a veth
    whose peer is in NAPI mode stops its queue when the ring is full, so a qdisc (here pfifo)
    holds packets instead of dropping them: backpressure, as a NIC's ring and qdisc give.
    A port that forwards needs forwarding_port as well.
    """
    return [in_ns(ns, "ethtool", "-K", dev, "gro", "on", check=False),
            in_ns(ns, "tc", "qdisc", "replace", "dev", dev, "root", "pfifo", "limit", "1000")]


def forwarding_port(ns: str, dev: str) -> Cmd:
    """Let a router port hand forwarded packets to its peer's NAPI ring (and so to backpressure).

    nic_like's ring and queue only work for packets the veth deems fit for its peer's GRO: a
    packet the sender generated itself, or any packet when the sending end has no TSO (the
    kernel's veth_skb_is_eligible_for_gro). A router forwards others' packets, so with TSO on
    (a veth's default) every one of them went to the shared per-CPU backlog instead and was
    dropped when it was full: 900 to 1,600 drops a second at the compute router's host ports
    under the demo's workload, the same for both gateway kinds, and TCP's repairs of them set
    the small requests' p99. What these ports forward arrives MTU-sized (the gateways' and the
    storage nodes' ports segment), so TSO had nothing to do here anyway.
    """
    return in_ns(ns, "ethtool", "-K", dev, "tso", "off")


def per_cpu_rings(ns: str, dev: str) -> Cmd:
    """Give a veth end one receive ring per CPU (veths are created with one).

    An XDP_REDIRECT into a veth lands in the ring of the redirecting CPU's number modulo the ring
    count, and a full ring drops: XDP has no qdisc to push back into. With one ring both CPUs'
    redirect bursts shared its 256 slots, and half of the demo's crosszone runs lost a few
    hundred frames at the routers' gateway ports (none in seven with a ring per CPU). A NIC
    has a TX ring per queue, drained by the wire. Set on both routers' gateway ports, for both
    gateway kinds.
    """
    return in_ns(ns, "ethtool", "-L", dev, "rx", str(os.cpu_count() or 1))


def wire_segmented(ns: str, dev: str) -> Cmd:
    """Make `dev` transmit MTU-sized packets with complete checksums, as a wire would carry them.

    Between namespaces a veth passes GSO super-packets (64 KB) intact, so a kernel gateway fed
    by a veth would handle a 64 KB skb at the cost of one packet, which no gateway on a real
    wire does, while an XDP gateway sees each MTU frame. The routers' ports toward the gateways
    therefore segment and checksum in software (no TSO, no CHECKSUM_PARTIAL: an XDP program
    would forward a partial checksum as is), for both gateway kinds alike.
    """
    return in_ns(ns, "ethtool", "-K", dev, "tx", "off")


def full_checksums(ns: str, dev: str) -> Cmd:
    """Make `dev` send packets with complete checksums.

    A veth never computes a checksum: with TX offload on, a packet leaves with CHECKSUM_PARTIAL
    and only the pseudo-header sum in the TCP field, and every hop trusts the skb flag. An XDP
    program sees raw bytes instead, fixes that partial sum incrementally and sends a frame whose
    checksum is wrong for the receiver. A real NIC would have filled it in on the wire, so the
    traffic sources (endpoints, storage nodes) compute it in software, as a wire would deliver
    it, for both gateway kinds alike. (It also turns TSO off there: the gateways see MTU-sized
    packets, as from a real network.)
    """
    return in_ns(ns, "ethtool", "-K", dev, "tx", "off")

