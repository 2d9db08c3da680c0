"""Bring the emulated deployment up and down, report its status, switch gateway sets.

`build_ops` is the whole plan as a list of operations (tested without root); `up` applies it
through an Executor, then waits (injected clock) for BGP to converge. `down` removes everything,
from the state file and by sweeping the `czemu-` prefix, and works after a crash.

Who configures a gateway's routing: the emulator writes the FRR configuration of the routers and
of the gateways of a kind without an agent (legacy); a gateway whose kind attaches (crosszone)
is deployed as a real gateway host is, its FRR daemons started empty and its agent rendering and
applying its configuration from the cluster intent (control_plane.py). So the switch moves
traffic to and from a legacy gateway by its own announcements, and to and from a crosszone
gateway on the routers' side: they take its routes or keep it on standby (`frr.router_accept_ops`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from crosszone.linux import links, netns, pids
from crosszone.linux.netns import Executor, Op, in_ns
from crosszone_lab.emulate import (
    control_plane,
    frr,
    kinds,
    prometheus,
    queue_metrics,
    queues,
    storage,
)
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.topology import (
    PIN_ROOT,
    PREFIX,
    RUN_DIR,
    VXLAN_PORT,
    Gateway,
    Plan,
    TopologySpec,
    plan,
    router_mac,
    vxlan_name,
)

#: Where FRR makes a directory per pathspace (`-N NAME`), which `down` removes.
FRR_PATHSPACES = Path("/var/run/frr")
#: How long every session of a gateway whose agent configured it must have been up before `up`
#: is done (`wait_sessions`).
SETTLED_S = 3.0
Clock = Callable[[], float]
Sleep = Callable[[float], None]
DeployError = kinds.DeployError  # raised by a kind's attach as well


def _host_ops(p: Plan) -> list[Op]:
    """GPU hosts: per VPC a bridge + VXLAN device toward the anycast VTEP (the VPC vSwitch)."""
    ops: list[Op] = []
    for h in p.hosts:
        ops += netns.ns_sysctls(h.ns, forwarding=False)
        # The vSwitch namespace itself speaks no IPv6: its bridge and VXLAN devices would send
        # router solicitations from their own link-local addresses (forever, with backoff),
        # and the bridge floods what it originates to every port, the tunnel included.
        ops += [in_ns(h.ns, "sysctl", "-qw", f"net.ipv6.conf.{c}.disable_ipv6=1")
                for c in ("all", "default")]
        # Only the anycast VTEP is routed: the host has no path anywhere else.
        ops.append(in_ns(h.ns, "ip", "route", "replace", f"{p.spec.anycast_vtep}/32",
                         "via", f"10.1.{h.index}.1"))
        for ep in h.endpoints:
            vx, br = vxlan_name(ep.vpc), f"br-{ep.vpc.name}"
            ops += [
                in_ns(h.ns, "ip", "link", "add", br, "mtu", str(p.inner_mtu), "type", "bridge",
                      check=False),
                in_ns(h.ns, "ip", "link", "del", vx, check=False),
                # `remote` = anycast: unknown destinations (the VPC router MAC included) are
                # tunnelled to the gateways; the routers pick a gateway by ECMP.
                in_ns(h.ns, "ip", "link", "add", vx, "mtu", str(p.inner_mtu), "type", "vxlan",
                      "id", str(ep.vpc.vni), "local", h.vtep, "remote", str(p.spec.anycast_vtep),
                      "dstport", str(VXLAN_PORT), "nolearning"),
                in_ns(h.ns, "ip", "link", "set", vx, "master", br),
                in_ns(h.ns, "ip", "link", "set", f"ep-{ep.vpc.name}", "master", br),
                # A VPC vSwitch answers or drops link-local multicast and broadcast (IPv6
                # router/neighbour solicitations, MLD reports) itself; it never tunnels them to
                # the gateways. Flooding them would show up as fast-path drops
                # (drop_src_not_in_vpc: source fe80::/:: is not a VPC address) and as kernel
                # work on the legacy gateways, i.e. noise in the comparison. Unknown unicast
                # (the VPC router MAC) is still flooded: that is the way to the gateways.
                in_ns(h.ns, "bridge", "link", "set", "dev", vx, "mcast_flood", "off",
                      "bcast_flood", "off"),
                in_ns(h.ns, "ip", "link", "set", vx, "up"),
                in_ns(h.ns, "ip", "link", "set", br, "up"),
            ]
            v = p.spec.vpcs.index(ep.vpc) + 1
            ops += netns.ns_sysctls(ep.ns, forwarding=False)
            ops.append(links.full_checksums(ep.ns, "eth0"))
            # The VPC router is virtual (it is every gateway): a permanent neighbour entry
            # stands in for the ARP answer a real vSwitch would give locally.
            ops.append(in_ns(ep.ns, "ip", "neigh", "replace", ep.gw_addr, "lladdr",
                             router_mac(v), "dev", "eth0", "nud", "permanent"))
            for dst in [str(p.spec.storage.subnet)] + [str(x.storage_facing)
                                                      for x in p.spec.vpcs]:
                ops.append(in_ns(ep.ns, "ip", "route", "replace", dst, "via", ep.gw_addr))
            if ep.addr6 and ep.gw_addr6:
                ops += [in_ns(ep.ns, "sysctl", "-qw", f"net.ipv6.conf.eth0.{k}=0")
                        for k in ("accept_ra", "router_solicitations")]
                ops.append(in_ns(ep.ns, "ip", "-6", "neigh", "replace", ep.gw_addr6, "lladdr",
                                 router_mac(v), "dev", "eth0", "nud", "permanent"))
                for dst in [str(p.spec.storage.subnet6)] + [str(x.storage_facing6)
                                                           for x in p.spec.vpcs
                                                           if x.storage_facing6]:
                    ops.append(in_ns(ep.ns, "ip", "-6", "route", "replace", dst,
                                     "via", ep.gw_addr6))
    return ops


def _gateway_base_ops(p: Plan, gw: Gateway) -> list[Op]:
    ops: list[Op] = list(netns.ns_sysctls(gw.ns, forwarding=True))
    # On the storage-side link, not lo: its connected route, and so (BGP import check) the
    # gateway's announcement of it to the compute router, lives only while that link is up.
    ops.append(in_ns(gw.ns, "ip", "addr", "replace", f"{p.spec.anycast_vtep}/32",
                     "dev", frr.GATEWAY_STORAGE_DEV))
    return ops


def is_announcing(gw: Gateway, active: str) -> bool:
    """Whether a gateway of this kind announces under the active set."""
    return kinds.is_announcing(gw.kind, active)


def routing_by_agent(gw: Gateway) -> bool:
    """Whether `gw`'s FRR configuration is its agent's (a kind that attaches: the control plane
    programs it), not the emulator's."""
    return kinds.get(gw.kind).attaches


def take_in_ops(p: Plan, gw: Gateway) -> list[Op]:
    """Make `gw` carry traffic: a gateway the emulator configures announces its prefixes; one
    whose agent owns its routing announces what its intent says, and the routers take it."""
    return frr.router_accept_ops(p, gw, True) if routing_by_agent(gw) else frr.announce_ops(p, gw)


def take_out_ops(p: Plan, gw: Gateway) -> list[Op]:
    """Take `gw` out of the traffic (sessions and BFD stay up): withdrawn by the gateway the
    emulator configures, refused by the routers for a gateway whose agent owns its routing."""
    return (frr.router_accept_ops(p, gw, False) if routing_by_agent(gw)
            else frr.withdraw_ops(p, gw))


def build_ops(p: Plan, active: str) -> list[Op]:
    """Every operation of `up`, in order (fast-path attach excluded: it is optional)."""
    ops: list[Op] = list(netns.plan_namespaces(p.namespaces))
    for link in p.links:
        ops += links.plan_link(link)
    ops += _host_ops(p)
    for ns in (p.compute_router_ns, p.storage_router_ns):
        ops += netns.ns_sysctls(ns, forwarding=True)
        ops += [in_ns(ns, "sysctl", "-qw", f"net.{fam}.conf.{c}.ignore_routes_with_linkdown=1")
                for fam in ("ipv4", "ipv6") for c in ("all", "default")]
    sr = p.storage_router_ns
    ops += [
        in_ns(sr, "ip", "link", "add", "stlan", "type", "bridge", check=False),
        in_ns(sr, "ip", "addr", "replace", f"{p.storage_gw_addr}/{p.spec.storage.subnet.prefixlen}",
              "dev", "stlan"),
        in_ns(sr, "ip", "-6", "addr", "replace",
              f"{p.storage_gw_addr6}/{p.spec.storage.subnet6.prefixlen}", "dev", "stlan", "nodad"),
        in_ns(sr, "ip", "link", "set", "stlan", "up"),
    ]
    ops += [in_ns(sr, "ip", "link", "set", f"{n.name}", "master", "stlan")
            for n in p.storage_nodes]
    # The routers' ports toward hosts and storage nodes forward into veths: see forwarding_port.
    ops += [links.forwarding_port(p.compute_router_ns, f"h{h.index}") for h in p.hosts]
    ops += [links.forwarding_port(sr, n.name) for n in p.storage_nodes]
    for gw in p.gateways:
        # Both ends of every gateway link carry wire-size frames, whichever way: a kernel
        # gateway may GRO what it receives (as on a real NIC) but cannot hand a 64 KB
        # super-packet to the next hop, which an XDP gateway never could either.
        ops += [links.wire_segmented(p.compute_router_ns, f"g{gw.index}"),
                links.wire_segmented(p.storage_router_ns, f"g{gw.index}"),
                links.per_cpu_rings(p.compute_router_ns, f"g{gw.index}"),
                links.per_cpu_rings(p.storage_router_ns, f"g{gw.index}"),
                links.wire_segmented(gw.ns, "c0"),
                links.wire_segmented(gw.ns, "s0")]
        ops += _gateway_base_ops(p, gw)
        ops += kinds.get(gw.kind).configure(p, gw)
    # After plan_link's pfifo roots, which they replace on the ports they shape.
    ops += queues.plan_ops(p) + queues.reflect_ops(p)
    for node in p.storage_nodes:
        ops += storage.plan_node(p, node)
    # A gateway whose agent owns its routing (crosszone) starts on standby at the routers: it
    # is taken once its fast path is attached (`up` switches then), whatever it announces.
    standby = [g for g in p.gateways if routing_by_agent(g)]
    ops += frr.start_ops(p.compute_router_ns, frr.router_config(p, "compute", standby), p.spec)
    ops += frr.start_ops(p.storage_router_ns, frr.router_config(p, "storage", standby), p.spec)
    ops += frr.fast_reroute_ops(p, "compute") + frr.fast_reroute_ops(p, "storage")
    for gw in p.gateways:
        if routing_by_agent(gw):
            ops += frr.agent_start_ops(gw.ns, p.spec)
        else:
            ops += frr.start_ops(gw.ns, frr.gateway_config(p, gw, is_announcing(gw, active)),
                                 p.spec)
    return ops


def pidfiles(p: Plan) -> list[Path]:
    """Every pidfile the deployment's daemons write."""
    files = [frr.frr_dir(ns) / f"{d}.pid"
             for ns in [p.compute_router_ns, p.storage_router_ns] + [g.ns for g in p.gateways]
             for d in frr.DAEMONS]
    if p.spec.fast_reroute.enabled:
        files += [frr.fast_reroute_pidfile(ns) for ns in (p.compute_router_ns, p.storage_router_ns)]
    return (files + [storage.pidfile(n) for n in p.storage_nodes] + control_plane.pidfiles(p)
            + prometheus.pidfiles(bool(control_plane.gateways(p))) + queue_metrics.pidfiles(p))


@dataclass
class Deployment:
    """A deployment bound to an executor and a clock."""

    plan: Plan
    ex: Executor
    clock: Clock = time.monotonic
    sleep: Sleep = time.sleep
    topology_path: str = ""

    # ---- up ---------------------------------------------------------------------------------

    def up(self, log: Callable[[str], None] = print) -> st.State:
        """Build the deployment (tearing down a different or broken one first)."""
        spec = self.plan.spec
        old = st.load()
        if old and old.complete and old.spec == spec.model_dump(mode="json") and self.healthy():
            log("deployment already up")
            return old
        if old or netns.list_namespaces(self.ex, PREFIX):
            log("removing previous deployment")
            down(self.ex, log=log)
        state = st.State(topology=self.topology_path, spec=spec.model_dump(mode="json"),
                         namespaces=list(self.plan.namespaces),
                         pidfiles=[str(f) for f in pidfiles(self.plan)],
                         pin_dirs=[str(g.pin_dir) for g in self.plan.gateways
                                   if kinds.get(g.kind).attaches],
                         active=kinds.startup_set(spec.active))
        st.save(state)  # first, so that an interrupted `up` can still be taken down
        if state.pin_dirs and not os.path.ismount(PIN_ROOT.parent):
            # the agents pin their maps there; a fresh boot may not have it mounted
            log(f"mounting the BPF filesystem on {PIN_ROOT.parent}")
            self.ex.apply([netns.Cmd(("mount", "-t", "bpf", "bpf", str(PIN_ROOT.parent)))])
        log(f"building {len(self.plan.namespaces)} namespaces")
        self.ex.apply(build_ops(self.plan, spec.active))
        for kind in kinds.registry().values():
            gws = self.plan.gateways_of(kind.name)
            if not gws or not kind.attaches:
                continue
            if not kind.available():
                log(f"{kind.name} fast path not available: {kind.name} gateways stay unannounced")
                continue
            for gw in gws:
                log(f"attaching fast path on {gw.name}")
                kind.attach(self.ex, self.plan, gw)
                state.fastpath[gw.name] = True
                st.save(state)
        queue_target = None
        if spec.queues is not None:
            log("starting the queue exporter (per-class counters of the shaped ports)")
            queue_metrics.start()
            queue_target = queue_metrics.target()
        if any(state.fastpath.values()):
            log("starting Prometheus (scrapes the agents and the controller every second)")
            prometheus.start({g.name: control_plane.agent_metrics(g)
                              for g in control_plane.gateways(self.plan)},
                             control_plane.controller_url(), queues=queue_target)
        # A gateway's new session with a router is born with some churn (FRR 8.4 re-registers
        # the BFD session once the first connection is up, and resets BGP if BFD was already
        # up: docs/routing.md), back 2 s later: wait that out, so nothing is switched onto a
        # session about to drop.
        self.wait_sessions(settled_s=SETTLED_S if any(state.fastpath.values()) else 0.0)
        state.complete = True
        st.save(state)
        if kinds.needs_attach(spec.active) and any(state.fastpath.values()):
            self.switch(spec.active, log=log)
            return st.load() or state
        self.wait_routes(state.active, state)
        return state

    # ---- convergence ------------------------------------------------------------------------

    def _until(self, what: str, test: Callable[[], bool], timeout: float) -> float:
        start = self.clock()
        while True:
            if test():
                return self.clock() - start
            if self.clock() - start > timeout:
                raise DeployError(f"timed out after {timeout:.0f} s waiting for {what}")
            self.sleep(0.1)

    def speaking(self, state: st.State | None) -> list[Gateway]:
        """Gateways that run BGP: every gateway the emulator configures, and a gateway whose
        agent owns its routing once its fast path is attached (its agent configures BGP; without
        an agent its FRR stays empty)."""
        attached = state.fastpath if state else {}
        return [g for g in self.plan.gateways
                if not routing_by_agent(g) or attached.get(g.name)]

    def wait_sessions(self, timeout: float = 30.0, settled_s: float = 0.0) -> float:
        """Wait until every router has an Established session with every gateway that runs BGP
        (`speaking`), each up for at least `settled_s` seconds."""
        p = self.plan
        gws = self.speaking(st.load())

        def ok() -> bool:
            for ns, key in ((p.compute_router_ns, "compute_addr"),
                            (p.storage_router_ns, "storage_addr")):
                out = self.ex.output(list(frr.vtysh(ns, "show bgp summary json").argv), check=False)
                want = {getattr(g, key) for g in gws}
                if not want <= frr.established_peers(out, settled_s):
                    return False
            return True

        return self._until("BGP sessions", ok, timeout)

    def announced(self, active: str, state: st.State | None) -> list[Gateway]:
        """Gateways that announce under `active` (of a kind that attaches: only once attached)."""
        attached = state.fastpath if state else {}
        return [g for g in self.plan.gateways
                if is_announcing(g, active) and kinds.ready(g, attached)]

    def fib_targets(self) -> list[tuple[str, str]]:
        """(router namespace, prefix) of every route the gateways announce: the anycast VTEP
        at the compute router, every VPC's storage-facing prefixes at the storage router."""
        p = self.plan
        to_compute, to_storage = frr.gateway_prefixes(p)
        return ([(p.compute_router_ns, x) for x in to_compute]
                + [(p.storage_router_ns, x) for x in to_storage])

    def fib(self) -> dict[str, set[str]]:
        """Next hops installed in the routers' kernels for each announced prefix."""
        out: dict[str, set[str]] = {}
        for ns, prefix in self.fib_targets():
            family = "-6" if ":" in prefix else "-4"
            out[prefix] = frr.kernel_nexthops(self.ex.output(
                ["ip", "-n", ns, family, "-j", "-d", "route", "show", "exact", prefix],
                check=False))
        return out

    def route_hops(self) -> tuple[set[str], set[str]]:
        """(compute router's next-hop devices to the anycast VTEP, storage router's to VPC 1's
        prefix); device g<k> leads to gateway number k on both routers."""
        p = self.plan
        fib = self.fib()
        return (fib.get(f"{p.spec.anycast_vtep}/32", set()),
                fib.get(str(p.spec.vpcs[0].storage_facing), set()))

    def want_fib(self, gws: list[Gateway]) -> dict[str, set[str]]:
        """The FIB that exactly the gateways `gws` announcing produces."""
        return {prefix: {f"g{g.index}" for g in gws} for _ns, prefix in self.fib_targets()}

    def wait_routes(self, active: str, state: st.State | None, timeout: float = 30.0,
                    gws: list[Gateway] | None = None) -> float:
        """Wait until, for every announced prefix, the routers' kernel ECMP groups are exactly
        the announcing gateways."""
        gws = gws if gws is not None else self.announced(active, state)
        want = self.want_fib(gws)
        return self._until(f"routes via {sorted(g.name for g in gws)}",
                           lambda: self.fib() == want, timeout)

    # ---- switch -----------------------------------------------------------------------------

    def switch(self, to: str, log: Callable[[str], None] = print) -> float:
        """Move traffic to a gateway set by BGP announce/withdraw; returns seconds taken."""
        if to not in kinds.switch_targets():
            raise DeployError(f"no gateway set {to!r}: {kinds.describe(kinds.switch_targets())}")
        state = st.load()
        if state is None:
            raise DeployError("no deployment: run `crosszone emulate up` first")
        for name in kinds.members(to):
            gws = self.plan.gateways_of(name)
            if not kinds.get(name).attaches or not gws or any(
                    state.fastpath.get(g.name) for g in gws):
                continue
            if to == name:
                raise DeployError(f"{name} gateways have no fast path attached "
                                  "(`crosszone fastpath attach` missing or failed)")
            log(f"{name} gateways have no fast path: only "
                f"{' and '.join(k for k in kinds.members(to) if not kinds.get(k).attaches)} "
                "gateways announce")
        start = self.clock()
        new = self.announced(to, state)
        current = self.announced(state.active, state)
        old = [g for g in self.plan.gateways if g not in new]
        if not new:
            raise DeployError(f"no gateway of set {to!r} can carry traffic")
        # Make before break: the new set joins the ECMP group before the old one leaves it.
        for gw in new:
            self.ex.apply(take_in_ops(self.plan, gw))
        self.wait_routes(to, state, gws=current + [g for g in new if g not in current])
        for gw in old:
            self.ex.apply(take_out_ops(self.plan, gw))
        state.active = to
        st.save(state)
        self.wait_routes(to, state)
        took = self.clock() - start
        log(f"traffic now through {', '.join(g.name for g in new)} ({took:.2f} s)")
        return took

    # ---- health -----------------------------------------------------------------------------

    def healthy(self) -> bool:
        """All namespaces exist and every recorded daemon is alive."""
        existing = set(netns.list_namespaces(self.ex, PREFIX))
        if not set(self.plan.namespaces) <= existing:
            return False
        return all(pids.pidfile_alive(Path(f)) for f in pidfiles(self.plan))


def _kill_pids(targets: list[int], sleep: Sleep) -> None:
    """TERM, give them up to 2 s, then KILL."""
    alive = []
    for pid in targets:
        try:
            os.kill(pid, signal.SIGTERM)
            alive.append(pid)
        except ProcessLookupError:
            pass
    for _ in range(20):
        alive = [pid for pid in alive if _exists(pid)]
        if not alive:
            return
        sleep(0.1)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return Path(f"/proc/{pid}").exists() and "Z" not in _proc_state(pid)


def _proc_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def down(ex: Executor, log: Callable[[str], None] = print, sleep: Sleep = time.sleep) -> None:
    """Remove everything with the emulator's prefix: fast paths, daemons, namespaces, pins."""
    state = st.load()
    names = set(netns.list_namespaces(ex, PREFIX))
    if state:
        names |= {n for n in state.namespaces if n in names}
        # Daemons first: an agent left running would keep programming what is being detached.
        daemons = [pid for f in state.pidfiles if (pid := pids.read_pid(Path(f))) is not None]
        _kill_pids(daemons, sleep)
        for gw_name, attached in state.fastpath.items():
            ns = f"{PREFIX}{gw_name}"
            kind = kinds.by_gateway_name(gw_name)
            if attached and ns in names and kind is not None:
                ex.apply(kind.detach(ns, PIN_ROOT / gw_name))
    # Sweep: whatever still runs inside our namespaces (workers, daemons of a lost state file).
    for ns in sorted(names):
        out = ex.output(["ip", "netns", "pids", ns], check=False)
        _kill_pids([int(x) for x in out.split() if x.isdigit()], sleep)
    ex.apply(netns.delete_namespaces(sorted(names)))
    # FRR makes /var/run/frr/NS for a daemon started with -N NS, even with its sockets elsewhere
    for name in names:
        shutil.rmtree(FRR_PATHSPACES / name, ignore_errors=True)
    if names:
        log(f"removed {len(names)} namespaces")
    # Prometheus and the queue exporter run in the root namespace: no sweep finds them, their
    # pidfiles do (a lost state file included).
    prometheus.stop(sleep=sleep)
    queue_metrics.stop(sleep=sleep)
    if PIN_ROOT.exists():
        shutil.rmtree(PIN_ROOT, ignore_errors=True)
    if RUN_DIR.exists():
        shutil.rmtree(RUN_DIR, ignore_errors=True)


def make(spec: TopologySpec, ex: Executor | None = None, topology_path: str = "") -> Deployment:
    """A Deployment for a validated spec with the real executor and clock."""
    return Deployment(plan(spec), ex or Executor(), topology_path=topology_path)
