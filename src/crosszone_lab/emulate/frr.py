"""FRR for the emulated deployment: the routers' and the legacy gateways' configuration, daemon
command lines, and the routers' side of which gateways carry traffic.

Each namespace runs its own zebra + staticd + bgpd + bfdd. The routers and the gateways the
emulator configures itself (the legacy kind) read one integrated config file written here; each
daemon logs "No such command" for the parts that belong to another (the `bfd` block, the static
routes): harmless.

A crosszone gateway's FRR is not configured here: its daemons start from `AGENT_START_CONFIG`
(no BGP, no hostname) and its agent renders and applies the gateway's configuration from the
cluster intent's `bgp:` entry (agent/frr_config.py, docs/routing.md), as on a real gateway host.

Which gateway set carries traffic is decided by BGP only. A legacy gateway announces the anycast
VTEP toward the compute router and the storage-facing prefixes toward the storage router through
`network` statements; `announce_ops`/`withdraw_ops` toggle those statements through vtysh, so a
switch never rebuilds anything. A crosszone gateway announces whatever its agent renders, and the
routers decide whether to take it (`router_accept_ops`: an inbound route-map that denies
everything from a gateway on standby). Outbound route-maps keep a gateway from becoming a transit
path between the two routers (it only ever sends its own prefixes).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from crosszone.linux.netns import Cmd, Op, WriteFile, in_ns
from crosszone_lab.emulate.topology import (
    COMPUTE_ROUTER_AS,
    GATEWAY_AS,
    RUN_DIR,
    STORAGE_ROUTER_AS,
    Gateway,
    Plan,
    TopologySpec,
)

FRR_BIN = Path("/usr/lib/frr")
GATEWAY_COMPUTE_DEV, GATEWAY_STORAGE_DEV = "c0", "s0"  # a gateway's links (topology.links)
# zebra first: the others connect to its zserv socket; staticd holds the gateways' anchors
DAEMONS = ("zebra", "staticd", "bfdd", "bgpd")
MAX_PATHS = 16


def frr_dir(ns: str) -> Path:
    """Per-namespace directory for FRR config, pidfiles, sockets and logs."""
    return RUN_DIR / "frr" / ns


def _header(ns: str) -> list[str]:
    # `datacenter` defaults: 3 s keepalive / 9 s hold, fast advertisement; BFD does detection.
    return [
        "frr defaults datacenter",
        f"hostname {ns}",
        f"log file {frr_dir(ns) / 'frr.log'} informational",
        # microseconds: the failover bench puts these lines on one time axis with netlink's
        "log timestamp precision 6",
        "!",
    ]


def bfd_config(ns: str, spec: TopologySpec) -> str:
    """bfdd's own file: bgpd does not know the `bfd` node, and an `exit` it cannot match there
    would leave configuration mode and lose everything after it, so bfdd gets the block alone."""
    lines = _header(ns) + [
        "bfd",
        " profile fast",
        f"  detect-multiplier {spec.bfd.multiplier}",
        f"  receive-interval {spec.bfd.interval_ms}",
        f"  transmit-interval {spec.bfd.interval_ms}",
        " exit",
        "exit",
        "!",
        "end",
        "",
    ]
    return "\n".join(lines)


def _neighbor(addr: str, remote_as: int | str) -> list[str]:
    return [
        f" neighbor {addr} remote-as {remote_as}",
        # Retry a refused connection after 1 s rather than the default 10 s (FRR waits that
        # long when the peer's bgpd is not listening yet, which is the normal case at `up`).
        f" neighbor {addr} timers connect 1",
        f" neighbor {addr} bfd profile fast",
    ]


def _v6(prefix: str) -> bool:
    return ":" in prefix


#: The routers' inbound route-map for a gateway on standby: they keep the session and BFD with it
#: but take none of its routes (`router_accept_ops`).
STANDBY_MAP = "GW-STANDBY"


def _router(p: Plan, which: str) -> tuple[str, int, str]:
    """(namespace, AS, address of gw's side) of the compute or storage router."""
    if which == "compute":
        return p.compute_router_ns, COMPUTE_ROUTER_AS, "compute_addr"
    return p.storage_router_ns, STORAGE_ROUTER_AS, "storage_addr"


def router_config(p: Plan, which: str, standby: Iterable[Gateway] = ()) -> str:
    """Config of the compute ('compute') or storage ('storage') zone router; it takes no
    route from the gateways in `standby` (`router_accept_ops` changes that at run time)."""
    spec = p.spec
    ns, asn, attr = _router(p, which)
    if which == "compute":
        rid = "10.255.0.1"
        networks = [f"10.1.{h.index}.0/24" for h in p.hosts]
    else:
        rid = "10.255.0.2"
        networks = [str(spec.storage.subnet)]
    peers = [getattr(g, attr) for g in p.gateways]
    refused = {getattr(g, attr) for g in standby}
    families = ["ipv4"] + (["ipv6"] if which == "storage" and p.ipv6 else [])
    lines = _header(ns)
    # Routes carry their ECMP next hops inline instead of pointing at kernel nexthop-group
    # objects: when a link goes down the kernel evicts the nexthop from its groups, and when it
    # comes back zebra (8.4) reuses the group id it still believes complete without
    # re-installing it, so the kernel kept one gateway while zebra showed two. Inline
    # multipath is replaced atomically as well (make before break holds), and
    # ignore_routes_with_linkdown (set on the routers) skips a dead link's next hop at once.
    lines += ["no zebra nexthop kernel enable", "!"]
    lines += [
        f"router bgp {asn}",
        f" bgp router-id {rid}",
        " no bgp ebgp-requires-policy",
        " no bgp network import-check",
    ]
    for peer in peers:
        lines += _neighbor(peer, GATEWAY_AS)
    for fam in families:
        lines += [" !", f" address-family {fam} unicast"]
        lines += [f"  network {n}" for n in
                  (networks if fam == "ipv4" else [str(spec.storage.subnet6)])]
        if fam == "ipv6":
            # IPv6 routes ride the IPv4 sessions; bgpd gives them the global IPv6 address of
            # the session's interface as next hop (each storage link has one).
            lines += [f"  neighbor {peer} activate" for peer in peers]
        # Each gateway's routes are kept as received, so taking a gateway in or out of
        # service (the inbound route-map below) is decided here at once, without asking the
        # gateway to send its routes again.
        lines += [f"  neighbor {peer} soft-reconfiguration inbound" for peer in peers]
        lines += [f"  neighbor {peer} route-map {STANDBY_MAP} in" for peer in peers
                  if peer in refused]
        # All gateways share one AS, so their paths tie and multipath installs them as one
        # kernel nexthop group: that is the ECMP over gateways.
        lines += [f"  maximum-paths {MAX_PATHS}", " exit-address-family"]
    lines += ["exit", "!", f"route-map {STANDBY_MAP} deny 10", "exit", "!", "end", ""]
    return "\n".join(lines)


def router_accept_ops(p: Plan, gw: Gateway, accept: bool) -> list[Op]:
    """The routers' side of a gateway's service: take its routes (accept) or keep its session
    and BFD but take none of its routes (standby), at both routers, both families.

    This is how the emulator moves traffic to or from a gateway whose routing its agent owns
    (a crosszone gateway announces what its intent says, whatever the emulator's switch).
    Accepting goes to the storage router first and refusing to the compute router first: replies
    have a path before requests arrive, and requests stop before replies lose theirs. The
    routers keep the gateway's routes as received (soft-reconfiguration inbound), so the change
    is theirs alone and takes effect at once."""
    order = ("storage", "compute") if accept else ("compute", "storage")
    ops: list[Op] = []
    for which in order:
        ns, asn, attr = _router(p, which)
        addr = getattr(gw, attr)
        no = "no " if accept else ""
        cmds = ["configure terminal", f"router bgp {asn}"]
        for fam in ["ipv4"] + (["ipv6"] if which == "storage" and p.ipv6 else []):
            cmds += [f"address-family {fam} unicast",
                     f"{no}neighbor {addr} route-map {STANDBY_MAP} in", "exit-address-family"]
        op = vtysh(ns, *cmds, "end")
        # removing a route-map that is not set is not an error: accepting twice is fine, and
        # callers verify the outcome in the routers' kernels anyway
        ops.append(Cmd(op.argv, check=not accept))
    return ops


def gateway_prefixes(p: Plan) -> tuple[list[str], list[str]]:
    """(prefixes announced to the compute router, prefixes announced to the storage router).

    Each IPv6 storage-facing prefix goes out together with its two halves. Without kernel
    nexthop groups (see router_config) zebra 8.4 changes an IPv6 multipath route by deleting it
    and adding it again, ~70 us apart (measured with `ip -6 monitor route` on the storage
    router), so a reply arriving in between had no route: one datagram in ~40,000 was lost
    per switch run. zebra updates routes one after the other, so while one of the prefix and
    its half is being replaced the other still covers the address. IPv4 multipath routes are
    replaced atomically and need no cover."""
    facing = [str(v.storage_facing) for v in p.spec.vpcs]
    for v in p.spec.vpcs:
        if v.storage_facing6 is not None:
            facing += [str(v.storage_facing6)] + [
                str(h) for h in v.storage_facing6.subnets(prefixlen_diff=1)]
    return [f"{p.spec.anycast_vtep}/32"], facing


def gateway_config(p: Plan, gw: Gateway, active: bool) -> str:
    """Config of a gateway the emulator configures itself (the legacy kind, and any kind that
    has no agent): sessions to both routers, announcements if active. A crosszone gateway's
    agent renders the product's equivalent (agent/frr_config.py; tests/unit/test_frr_config.py
    compares the two)."""
    to_compute, to_storage = gateway_prefixes(p)
    v4 = [x for x in to_compute + to_storage if not _v6(x)]
    v6 = [x for x in to_storage if _v6(x)]
    lines = _header(gw.ns)
    # Each side is announced only while the gateway can reach the other: BGP's import check (on
    # by default) announces a `network` only while its route is in the RIB, and each announced
    # prefix's route depends on the far side's link. The storage-facing prefixes get interface
    # routes on the compute link (anchors); the anycast VTEP is an address on the storage link
    # (deploy._gateway_base_ops), so its connected route goes with that link. A gateway whose
    # compute link dies thus withdraws its storage-facing prefixes at once (else the storage
    # router kept sending it replies it could not deliver), and one whose storage link dies
    # withdraws the anycast VTEP. The anchors reach the kernel and change nothing there: replies
    # to those prefixes are translated before routing (legacy) or never routed by the kernel
    # (the fast path).
    lines += [f"{'ipv6' if _v6(x) else 'ip'} route {x} {GATEWAY_COMPUTE_DEV}"
              for x in to_storage]
    lines += [
        "!",
        f"router bgp {GATEWAY_AS}",
        f" bgp router-id {gw.router_id}",
        " no bgp ebgp-requires-policy",
    ]
    lines += _neighbor(gw.compute_peer, COMPUTE_ROUTER_AS)
    lines += _neighbor(gw.storage_peer, STORAGE_ROUTER_AS)
    lines += [" !", " address-family ipv4 unicast"]
    if active:
        lines += [f"  network {n}" for n in v4]
    lines += [
        f"  neighbor {gw.compute_peer} route-map TO-COMPUTE out",
        f"  neighbor {gw.storage_peer} route-map TO-STORAGE out",
        " exit-address-family",
    ]
    if v6:
        lines += [" !", " address-family ipv6 unicast"]
        if active:
            lines += [f"  network {n}" for n in v6]
        lines += [
            f"  neighbor {gw.storage_peer} activate",
            f"  neighbor {gw.storage_peer} route-map TO-STORAGE out",
            " exit-address-family",
        ]
    lines += ["exit", "!"]
    lines += [f"ip prefix-list CZ-ANYCAST seq {5 * n} permit {x}"
              for n, x in enumerate(to_compute, start=1)]
    lines += [f"ip prefix-list CZ-FACING seq {5 * n} permit {x}"
              for n, x in enumerate([x for x in to_storage if not _v6(x)], start=1)]
    lines += [f"ipv6 prefix-list CZ-FACING6 seq {5 * n} permit {x}"
              for n, x in enumerate(v6, start=1)]
    lines += [
        "!",
        "route-map TO-COMPUTE permit 10",
        " match ip address prefix-list CZ-ANYCAST",
        "exit",
        "!",
        "route-map TO-STORAGE permit 10",
        " match ip address prefix-list CZ-FACING",
        "exit",
        "!",
    ]
    if v6:
        lines += ["route-map TO-STORAGE permit 20",
                  " match ipv6 address prefix-list CZ-FACING6", "exit", "!"]
    lines += ["end", ""]
    return "\n".join(lines)


#: Real-time priority (SCHED_FIFO) of bfdd in every namespace.
BFDD_RT_PRIORITY = 10
#: Nice value of bgpd and zebra in every namespace (`_priority`).
ROUTING_NICE = -10


def control_cpus() -> tuple[str, str]:
    """(CPU list for bfdd, CPU list for fast-path loading), as `taskset -c` takes them.

    This kernel does not preempt a process inside a system call (PREEMPT_NONE), and real-time
    priority only helps once the CPU reaches a preemption point. A fast-path loader (`fastpath
    attach`, an agent starting) allocates ~320 MiB of slot tables in single bpf() calls: measured
    with `perf sched` and a real-time sentinel (`stallwatch`), it held its CPU for 0.3 to 1.2 s
    (the kernel zeroing fresh pages in `array_map_alloc`) while a SCHED_FIFO thread woken on that
    CPU waited, which is what made every BFD session on the box go down at once. So bfdd gets CPU
    0 and loaders never run there. On two CPUs that puts every bfdd of the emulation on CPU 0: at
    30 ms x 5 the six daemons of a 2 + 2 gateway emulation take about a third of it (routers' 8 %
    each, gateways' 4 %). (At 10 ms x 3 they took 15 to 35 % each and, with several emulations
    on the box, starved CPU 0: keep the 30 ms timers on two CPUs.) One CPU: nothing to split
    (empty strings: no pinning)."""
    n = os.cpu_count() or 1
    if n < 2:
        return "", ""
    return "0", f"1-{n - 1}"


def bfd_cpus() -> set[int]:
    """The CPUs bfdd may run on (`control_cpus`)."""
    bfd_cpu, _loader = control_cpus()
    return {int(bfd_cpu)} if bfd_cpu else set(range(os.cpu_count() or 1))


def loader_pin() -> tuple[str, ...]:
    """The `taskset` prefix that keeps a fast-path loader (an agent, `fastpath attach`) off the
    control CPU (empty on a one-CPU box)."""
    _bfd_cpu, loader = control_cpus()
    return ("taskset", "-c", loader) if loader else ()


def _priority(daemon: str) -> tuple[str, ...]:
    """The `taskset`/`chrt` prefix that starts `daemon` at its scheduling priority.

    A router runs BFD on a CPU of its own or in hardware; here bfdd shares two cores with every
    namespace, and at normal priority it missed its detection time whenever the box was busy:
    with one core held by a busy loop, the demo's 20 s workload saw about 20 BFD Down events,
    each a BGP hard reset whose routes vanished for a second (issue 12, finding 17). So bfdd runs
    at SCHED_FIFO 10, pinned to the control CPU (`control_cpus`). zebra and bgpd stay at normal
    priority: given SCHED_FIFO 5, a router's bgpd took 90 % of a CPU through a run of planned
    switches and starved the box (load average 96); a real-time daemon that can be busy for
    long is worse than a late one. They run at nice -10 instead (`ROUTING_NICE`): still shared
    fairly, but ahead of the workload and of ksoftirqd's packet processing when a migration step
    needs them. Measured by `bench migrate` under the workload (load average 9 to 12), with the
    step's commands sent to every gateway at once: converge_ms 183 to 539 ms against 234 to 821
    at nice 0."""
    if daemon == "bfdd":
        return realtime_on_bfd_cpu(BFDD_RT_PRIORITY)
    if daemon in ("bgpd", "zebra"):
        return ("nice", "-n", str(ROUTING_NICE))
    return ()


def realtime_on_bfd_cpu(priority: int) -> tuple[str, ...]:
    """The `taskset`/`chrt` prefix that runs a command at SCHED_FIFO `priority` on bfdd's CPU
    (`control_cpus`; no pinning on a one-CPU box)."""
    bfd_cpu, _loader = control_cpus()
    pin = ("taskset", "-c", bfd_cpu) if bfd_cpu else ()
    return (*pin, "chrt", "-f", str(priority))


#: What the FRR daemons of a gateway whose agent owns its routing start from: the defaults the
#: agent renders (they can only be set at start) and nothing else. No `hostname`: vtysh shows the
#: machine's beside the daemons' and neither can be removed at run time, so the agent renders the
#: machine's and a daemon started with another would differ from it at every comparison. No
#: `log file`, no BGP, no BFD profile: whatever the start file holds that the agent does not
#: render, its first apply deletes. The daemons log to a file given on their command line instead
#: (`daemon_start_op`), which is not part of the running configuration.
AGENT_START_CONFIG = "frr defaults datacenter\n!\n"


def start_ops(ns: str, config: str, spec: TopologySpec, bfd: str | None = None,
              log_arg: bool = False) -> list[Op]:
    """Write the configs and start the FRR daemons inside `ns` (daemonised, pidfiles). bfd:
    bfdd's start file (default: the emulator's profile, `bfd_config`); log_arg: the log file
    is given on the daemons' command line (`daemon_start_op`)."""
    d = frr_dir(ns)
    ops: list[Op] = [
        WriteFile(d / "frr.conf", config),
        WriteFile(d / "bfdd.conf", bfd_config(ns, spec) if bfd is None else bfd),
        WriteFile(d / "frr.log", ""),
        # The daemons drop to user frr (and insist on group frrvty for vty sockets), so the
        # directory holding their pidfiles, sockets and log must be theirs.
        Cmd(("chown", "-R", "frr:frr", str(d))),
    ]
    return ops + [daemon_start_op(ns, daemon, log_arg) for daemon in DAEMONS]


def agent_start_ops(ns: str, spec: TopologySpec) -> list[Op]:
    """Start the FRR daemons of a gateway whose agent owns its routing, from
    `AGENT_START_CONFIG`: the agent (`crosszone agent --frr-vty frr_dir(ns)`) writes the
    gateway's configuration into the same frr.conf, so a daemon restarted later (a failure's
    repair) comes back with it. bfdd starts from the same minimal file: bfdd's own file of the
    routers would give it a profile the agent does not render."""
    return start_ops(ns, AGENT_START_CONFIG, spec, bfd=AGENT_START_CONFIG, log_arg=True)


def daemon_start_op(ns: str, daemon: str, log_arg: bool = False) -> Cmd:
    """Start one FRR daemon of `ns` (daemonised, pidfile) from the configs `start_ops` wrote.
    log_arg: log to frr.log by command line (a daemon whose configuration its agent owns: the
    agent renders no `log file`, and a line in the start file would be deleted by its first
    apply); the others' start files name the log."""
    d = frr_dir(ns)
    conf = d / ("bfdd.conf" if daemon == "bfdd" else "frr.conf")
    extra: tuple[str, ...] = ("--bfdctl", str(d / "bfdd.sock")) if daemon == "bfdd" else ()
    if log_arg:
        extra += ("--log", f"file:{d / 'frr.log'}", "--log-level", "informational")
    return in_ns(
        ns, *_priority(daemon), str(FRR_BIN / daemon), "-d", "-N", ns, *extra,
        "-f", str(conf), "-i", str(d / f"{daemon}.pid"),
        "-z", str(d / "zserv.api"), "--vty_socket", str(d),
        # -P 0: no TCP vty port; vtysh uses the unix sockets.
        "-P", "0",
    )


def vtysh(ns: str, *commands: str) -> Cmd:
    """One vtysh invocation against the instance of `ns`."""
    # --vty_socket alone: combined with -N, vtysh appends the namespace to the path again.
    argv = ["vtysh", "--vty_socket", str(frr_dir(ns))]
    for c in commands:
        argv += ["-c", c]
    return Cmd(tuple(argv))


def _network_ops(p: Plan, gw: Gateway, negate: bool) -> list[Op]:
    return prefix_ops(gw, *gateway_prefixes(p), negate=negate)


def announce_ops(p: Plan, gw: Gateway) -> list[Op]:
    """Make `gw`, a gateway whose FRR the emulator configures (`gateway_config`), carry
    traffic: announce its prefixes."""
    return _network_ops(p, gw, negate=False)


def withdraw_ops(p: Plan, gw: Gateway) -> list[Op]:
    """Take `gw`, a gateway whose FRR the emulator configures, out of the traffic: withdraw its
    prefixes (sessions and BFD stay up)."""
    return _network_ops(p, gw, negate=True)


def established_peers(summary_json: str, settled_s: float = 0.0) -> set[str]:
    """Neighbours in Established state, from `show bgp summary json` (with settled_s: only
    those Established for at least that long)."""
    try:
        data = json.loads(summary_json or "{}")
    except json.JSONDecodeError:
        return set()
    peers = data.get("ipv4Unicast", {}).get("peers", {})
    return {addr for addr, info in peers.items() if info.get("state") == "Established"
            and int(info.get("peerUptimeMsec") or 0) >= settled_s * 1000}


def route_nexthops(route_json: str, prefix: str) -> set[str]:
    """Next-hop addresses of the selected, installed route to `prefix` (`show ip route X json`)."""
    try:
        data = json.loads(route_json or "{}")
    except json.JSONDecodeError:
        return set()
    hops: set[str] = set()
    for route in data.get(prefix, []):
        if not route.get("selected"):
            continue
        for nh in route.get("nexthops", []):
            if nh.get("active") and "ip" in nh:
                hops.add(nh["ip"])
    return hops


def kernel_nexthops(route_json: str) -> set[str]:
    """Devices of the live next hops of the kernel route(s) in `ip -j -d route show exact PREFIX`.

    Devices, not addresses: a router reaches gateway k through its device g<k> whatever the
    family, and bgpd gives IPv6 routes a link-local next hop.

    The kernel's table, not zebra's RIB, is what forwards: zebra marks a route selected before
    its dataplane thread has installed the nexthop group, so make-before-break waits for this.
    """
    return set(kernel_weights(route_json))


# ---- weighted migration (crosszone migrate) ----------------------------------------------------
# Commands for a gateway whose FRR the emulator configures (`gateway_config`: the legacy kind).
# The migration's emulator driver (emulate/migration.py) still sends them to both sides until the
# migration goes through the agents (issue 23, deliverable 2); on a crosszone gateway its agent
# owns the configuration and puts back what differs from the intent.

def prefix_commands(to_compute: list[str], to_storage: list[str], negate: bool) -> list[str]:
    """bgpd configuration commands that announce (or withdraw) some of a gateway's prefixes
    through `network` statements."""
    # Storage-facing first on announce, anycast first on withdraw: replies have a path before
    # requests arrive, and requests stop before replies lose theirs.
    order = to_storage + to_compute if not negate else to_compute + to_storage
    no = "no " if negate else ""
    v4 = [f"{no}network {n}" for n in order if not _v6(n)]
    v6 = [f"{no}network {n}" for n in order if _v6(n)]
    cmds = ["configure terminal", f"router bgp {GATEWAY_AS}"]
    if v4:
        cmds += ["address-family ipv4 unicast", *v4, "exit-address-family"]
    if v6:
        cmds += ["address-family ipv6 unicast", *v6, "exit-address-family"]
    return [*cmds, "end"]


def prefix_ops(gw: Gateway, to_compute: list[str], to_storage: list[str], negate: bool
               ) -> list[Op]:
    """prefix_commands through vtysh."""
    op = vtysh(gw.ns, *prefix_commands(to_compute, to_storage, negate))
    # vtysh fails on `no network X` when X is not configured: withdrawing twice is fine, and
    # callers verify the outcome in the routers' tables anyway.
    return [Cmd(op.argv, check=not negate)]


#: Link-bandwidth units per percent of traffic: FRR takes 1..25600 Mbps per path and weighs
#: each next hop by its share of the total, so 100 % spread over up to 8 gateways of a kind
#: stays an integer >= 1 per gateway.
BW_PER_PERCENT = 200


def link_bandwidth(percent: float, gateways: int) -> int:
    """The link-bandwidth value (Mbps) each of `gateways` gateways announces to carry
    `percent` of the traffic between them."""
    return max(1, min(25600, round(percent * BW_PER_PERCENT / max(1, gateways))))


def weight_commands(bandwidth: int | None, drain: bool, v6: bool) -> list[str]:
    """bgpd commands that set what a gateway attaches to its announcements: the BGP
    link-bandwidth extended community (draft-ietf-idr-link-bandwidth, RFC 10005; None: none,
    plain ECMP) that the routers turn into next-hop weights, and the graceful-shutdown community
    (RFC 8326) that drains it: an FRR receiver lowers an eBGP path carrying it to local
    preference 0, so the routers keep the gateway's routes as backup but send it nothing while
    another gateway announces. `clear ... soft out` re-sends the routes at once: FRR otherwise
    applies a route-map change after its 5 s route-map delay timer."""
    bw = f"set extcommunity bandwidth {bandwidth}" if bandwidth else "no set extcommunity bandwidth"
    cmds = ["configure terminal",
            "route-map TO-COMPUTE permit 10", bw, "exit",
            "route-map TO-STORAGE permit 10", bw, "exit"]
    if v6:
        cmds += ["route-map TO-STORAGE permit 20", bw, "exit"]
    cmds += [f"router bgp {GATEWAY_AS}",
             "bgp graceful-shutdown" if drain else "no bgp graceful-shutdown", "end",
             "clear bgp ipv4 unicast * soft out"]
    if v6:
        cmds.append("clear bgp ipv6 unicast * soft out")
    return cmds


def kernel_weights(route_json: str) -> dict[str, int]:
    """Device -> weight of the live next hops in `ip -j -d route show exact PREFIX` (a route
    with one next hop has weight 1)."""
    try:
        data = json.loads(route_json or "[]")
    except json.JSONDecodeError:
        return {}
    out: dict[str, int] = {}
    for route in data if isinstance(data, list) else []:
        if route.get("type", "unicast") != "unicast":
            continue
        for nh in route.get("nexthops") or [route]:
            flags = nh.get("flags") or []
            if "gateway" in nh and "dev" in nh and "dead" not in flags \
                    and "linkdown" not in flags:
                out[str(nh["dev"])] = int(nh.get("weight", 1))
    return out


# ---- the routers' fast reroute (emulate/fastreroute.py) -----------------------------------------


#: Real-time, so its 5 ms ticks are kept on a busy box, but below bfdd's: a gateway's return
#: sets off bursts of route work (netlink dumps in Python), and at priority 20 those held bfdd off
#: CPU 0 long enough for every BFD session of the router to go down at once.
FAST_REROUTE_RT_PRIORITY = 5


def fast_reroute_pidfile(ns: str) -> Path:
    return frr_dir(ns) / "fastreroute.pid"


def fast_reroute_ops(p: Plan, side: str) -> list[Op]:
    """The /32 routes that pin each gateway's echo path both ways, and the daemon of the
    router on `side` (compute|storage), real-time on bfdd's CPU."""
    fr = p.spec.fast_reroute
    if not fr.enabled:
        return []
    ns = p.compute_router_ns if side == "compute" else p.storage_router_ns
    ops: list[Op] = []
    peers: list[str] = []
    for gw in p.gateways:
        dev = f"g{gw.index}"
        # The far router's address on this gateway's far link, reached through this gateway.
        far, via = ((gw.storage_peer, gw.compute_addr) if side == "compute"
                    else (gw.compute_peer, gw.storage_addr))
        ops.append(in_ns(ns, "ip", "route", "replace", f"{far}/32", "via", via, "dev", dev))
        peers += ["--peer", f"{dev}={far}"]
    d = frr_dir(ns)
    ops.append(in_ns(ns, *realtime_on_bfd_cpu(FAST_REROUTE_RT_PRIORITY), sys.executable,
                     "-m", "crosszone_lab.emulate.fastreroute",
                     "--daemon", "--pidfile", str(fast_reroute_pidfile(ns)),
                     "--log", str(d / "fastreroute.log"), "--ns", ns,
                     "--interval-ms", f"{fr.interval_ms:g}", "--multiplier", str(fr.multiplier),
                     "--restore-ms", f"{fr.restore_ms:g}", "--dscp", str(p.spec.policy.small_dscp),
                     *peers))
    return ops
