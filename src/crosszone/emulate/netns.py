"""Operations the emulator wants done, and the one sink that performs them.

Planning modules return lists of `Cmd` and `WriteFile`; `Executor.apply` runs them. Tests use
`RecordingExecutor` and never touch the kernel. Namespace plumbing (veths, addresses, sysctls)
is planned here because every other module needs it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crosszone.emulate.topology import Link, Plan


@dataclass(frozen=True)
class Cmd:
    """A command line; `check=False` for steps that may legitimately fail (already gone)."""

    argv: tuple[str, ...]
    check: bool = True
    stdin: str | None = None

    def __str__(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True)
class WriteFile:
    path: Path
    text: str


Op = Cmd | WriteFile


def cmd(*argv: str, check: bool = True, stdin: str | None = None) -> Cmd:
    """Build a Cmd from words."""
    return Cmd(tuple(argv), check, stdin)


def in_ns(ns: str, *argv: str, check: bool = True, stdin: str | None = None) -> Cmd:
    """A command run inside namespace `ns`."""
    return Cmd(("ip", "netns", "exec", ns, *argv), check, stdin)


class CommandFailed(RuntimeError):
    """A checked command exited non-zero."""


class Executor:
    """Runs operations for real."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose

    def apply(self, ops: Iterable[Op]) -> None:
        for op in ops:
            if isinstance(op, WriteFile):
                op.path.parent.mkdir(parents=True, exist_ok=True)
                op.path.write_text(op.text)
                continue
            if self.verbose:
                print("+", op)
            res = subprocess.run(
                op.argv, input=op.stdin, capture_output=True, text=True, check=False
            )
            if op.check and res.returncode != 0:
                raise CommandFailed(f"`{op}` exited {res.returncode}: {res.stderr.strip()}")

    def output(self, argv: Sequence[str], check: bool = True) -> str:
        """Run a query and return its stdout."""
        res = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        if check and res.returncode != 0:
            raise CommandFailed(f"`{' '.join(argv)}` exited {res.returncode}: {res.stderr.strip()}")
        return res.stdout


@dataclass
class RecordingExecutor(Executor):
    """Records operations instead of running them (unit tests)."""

    ops: list[Op] = field(default_factory=list)
    outputs: dict[tuple[str, ...], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(verbose=False)

    def apply(self, ops: Iterable[Op]) -> None:
        self.ops.extend(ops)

    def output(self, argv: Sequence[str], check: bool = True) -> str:
        return self.outputs.get(tuple(argv), "")


def ns_sysctls(ns: str, forwarding: bool) -> list[Cmd]:
    """Per-namespace sysctls: forwarding, no reverse-path filter, L4 ECMP hashing."""
    sets = [
        # Asymmetric paths are normal here (ECMP per direction), so strict rp_filter would drop.
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        # Hash ECMP on the 5-tuple: VXLAN flows differ only in the outer UDP source port.
        "net.ipv4.fib_multipath_hash_policy=1",
        f"net.ipv4.ip_forward={1 if forwarding else 0}",
        "net.ipv6.conf.all.forwarding=" + ("1" if forwarding else "0"),
        # IPv6 flushes global addresses when a link goes down unless told otherwise; the
        # failover tests take links down and up, and BGP's IPv6 next hops need them back.
        "net.ipv6.conf.all.keep_addr_on_down=1",
        "net.ipv6.conf.default.keep_addr_on_down=1",
    ]
    return [in_ns(ns, "sysctl", "-qw", s) for s in sets]


def plan_namespaces(p: Plan) -> list[Op]:
    """Create every namespace (idempotent: existing ones are kept) with loopback up."""
    ops: list[Op] = []
    for ns in p.namespaces:
        ops.append(cmd("ip", "netns", "add", ns, check=False))
        ops.append(in_ns(ns, "ip", "link", "set", "lo", "up"))
    return ops


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


def list_namespaces(ex: Executor, prefix: str) -> list[str]:
    """Names of existing namespaces starting with prefix."""
    out = ex.output(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix))


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

