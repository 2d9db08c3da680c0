"""The emulator as a migration driver (`crosszone.migrate.engine.Driver`).

How the emulated deployment does what the engine asks:

- **parity**: each target gateway is attached, its maps read back from the kernel equal what its
  intent compiles to (`fastpath.parity.drift`), and both routers have an Established BGP session
  and an up BFD session with it.
- **canary**: the canary VPC's storage-facing prefixes (IPv4, IPv6 and its halves) move to the
  target gateways alone (they announce them first, then the source gateways withdraw them), so
  every reply to that VPC crosses a new gateway while production VPCs stay untouched. Its
  requests still reach whichever gateways announce the anycast VTEP: one VTEP serves every VPC.
  The verdict comes from HTTP reads of known content from every canary endpoint to every
  storage node in both families, against the same reads from production endpoints.
- **weights**: each gateway attaches the BGP link-bandwidth extended community to its
  announcements (its share of the step's percentage); the routers' multipath turns the shares
  into kernel next-hop weights, in both directions (the anycast VTEP at the compute router, the
  storage-facing prefixes at the storage router). At 100 % the source gateways are drained with
  the graceful-shutdown community instead (their paths stay as backup). `converge_ms` is read
  from the routers' kernels over netlink (`fib_watch`).
- **guards**: HTTP reads from every production endpoint to every storage node (errors, p99),
  the target gateways' fast-path drop counters, BGP/BFD session state.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from crosszone.compile.gateway import Ids, compile_gateway
from crosszone.fastpath.bpf_map import BpfMap
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.parity import drift
from crosszone.linux.netns import in_netns
from crosszone.migrate.agent_driver import AgentDriver, LegacySide, ProbeRound, standby
from crosszone.migrate.engine import read_state
from crosszone.migrate.plan import Plan
from crosszone.store.objects import join_objects
from crosszone.store.store import INTENT, STATUS, Store, open_store
from crosszone_lab.emulate import (
    control_plane,
    frr,
    kinds,
    legacy_adapter_commands,
    legacy_gateway,
    storage,
)
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.deploy import Deployment
from crosszone_lab.emulate.fib_watch import RouterFib, share
from crosszone_lab.emulate.topology import Endpoint, Gateway
from crosszone_lab.emulate.vty import Vty, VtyError
from crosszone_lab.workload import probe

#: Share (percentage points) by which a router's kernel weights may differ from the step's:
#: FRR rounds each next hop's weight to an integer percent of the total.
SHARE_TOLERANCE = 2.5
#: Below this p99 (ms) latency is noise on a shared two-core box, not a slower path: latency
#: factors are taken against at least this much.
LATENCY_FLOOR_MS = 50.0
PROBE_PATH = "/meta/shard-00000.json"


class MigrationDriverError(RuntimeError):
    """The emulator could not do what a migration step needs."""


#: SCHED_FIFO priority of the thread that sends a step's commands and watches the routers'
#: kernels (`_realtime`): below the routers' fast reroute (5) and bfdd (10), above the workload,
#: the agents and ksoftirqd's packet processing, which otherwise delayed each of its many
#: wake-ups on the loaded box (a step's commands took up to 258 ms to send, and the poll saw the
#: kernel's new weights up to 1.6 s after zebra had written them: `bench migrate`,
#: update_rcvd_ms/written_ms against converge_ms).
MOVE_RT_PRIORITY = 1


@contextlib.contextmanager
def _realtime(priority: int) -> Iterator[None]:
    """Run the block with the calling thread at SCHED_FIFO `priority` (threads it starts
    inherit it), then restore its policy; without the privilege, at its usual priority."""
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError:
        yield
        return
    try:
        yield
    finally:
        os.sched_setscheduler(0, policy, param)


@dataclass
class EmulatorDriver:
    """Drives a migration on the emulated deployment `dep`."""

    dep: Deployment
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    #: where failed probes are described (the guard only counts them)
    log: Callable[[str], None] = lambda _m: None
    canary_on: bool = False
    baseline_p99_ms: float | None = None
    #: events of the last set_weight: {"announce_ms", "converge_ms"}
    last_move: dict[str, float] = field(default_factory=dict)
    _drops0: dict[str, int] = field(default_factory=dict)
    _retired: bool = False
    #: gateways whose agent's metrics endpoint timed out at the previous guard reading
    _agent_slow: set[str] = field(default_factory=set)
    _vtys: dict[tuple[str, str], Vty] = field(default_factory=dict)
    _fibs: list[RouterFib] = field(default_factory=list)

    # ---- FRR sessions -------------------------------------------------------------------------

    def vty(self, ns: str, daemon: str = "bgpd") -> Vty:
        """The open vty session with `daemon` in `ns` (opened on first use)."""
        key = (ns, daemon)
        if key not in self._vtys:
            self._vtys[key] = Vty(ns, daemon)
        return self._vtys[key]

    def configure(self, gws: list[Gateway], lines: list[str], check: bool = True) -> None:
        """Run the same bgpd commands on every gateway of `gws` at once, one thread each: each
        gateway re-sends its routes on a timer of its own that starts with its commands, so
        gateways configured one after the other on a busy box (tens of ms each) converged one
        after the other too. A session that broke (daemon restarted) is opened again once. The
        first error is raised after every gateway was tried."""
        if len(gws) <= 1:
            for gw in gws:
                self._configure_one(gw, lines, check)
            return
        with ThreadPoolExecutor(max_workers=len(gws)) as pool:
            futures = [pool.submit(self._configure_one, gw, lines, check) for gw in gws]
        for f in futures:
            f.result()

    def _configure_one(self, gw: Gateway, lines: list[str], check: bool) -> None:
        # each thread touches only its own gateway's session
        try:
            self.vty(gw.ns).run(lines, check)
        except (VtyError, OSError):
            old = self._vtys.pop((gw.ns, "bgpd"), None)
            if old is not None:
                old.close()
            self.vty(gw.ns).run(lines, check)

    def show(self, ns: str, daemon: str, line: str) -> str:
        """A show command's output ('' when the daemon cannot be reached)."""
        try:
            return self.vty(ns, daemon).command(line, check=False)
        except (VtyError, OSError):
            old = self._vtys.pop((ns, daemon), None)
            if old is not None:
                old.close()
            return ""

    def close(self) -> None:
        """Close every vty session and netlink socket."""
        for v in self._vtys.values():
            v.close()
        self._vtys.clear()
        self._close_fibs()

    def _close_fibs(self) -> None:
        for fib in self._fibs:
            fib.close()
        self._fibs.clear()

    def fibs(self) -> list[RouterFib]:
        """Netlink sockets into both routers (opened once: a socket and a link dump cost tens
        of ms on the loaded box, at the start of every wait)."""
        if not self._fibs:
            p = self.dep.plan
            self._fibs = [RouterFib(p.compute_router_ns), RouterFib(p.storage_router_ns)]
        return self._fibs

    # ---- who is who ---------------------------------------------------------------------------

    def sides(self, plan: Plan) -> tuple[list[Gateway], list[Gateway]]:
        """(source gateways, target gateways)."""
        p = self.dep.plan
        return list(p.gateways_of(plan.source)), list(p.gateways_of(plan.target))

    def canary_prefixes(self, plan: Plan) -> list[str]:
        """Storage-facing prefixes of the canary VPC (IPv6 with its halves: gateway_prefixes)."""
        if plan.canary is None:
            return []
        vpc = next(v for v in self.dep.plan.spec.vpcs if v.name == plan.canary)
        out = [str(vpc.storage_facing)]
        if vpc.storage_facing6 is not None:
            out += [str(vpc.storage_facing6)] + [
                str(h) for h in vpc.storage_facing6.subnets(prefixlen_diff=1)]
        return out

    def production(self, plan: Plan) -> tuple[list[str], list[str]]:
        """(anycast prefixes, storage-facing prefixes) that the weights move: all of them, but
        the canary's while the canary is on (those stay with the target gateways)."""
        to_compute, to_storage = frr.gateway_prefixes(self.dep.plan)
        canary = set(self.canary_prefixes(plan)) if self.canary_on else set()
        return to_compute, [x for x in to_storage if x not in canary]

    def endpoints(self, plan: Plan, canary: bool) -> list[Endpoint]:
        """The canary VPC's endpoints (canary=True) or every production endpoint."""
        return [e for e in self.dep.plan.endpoints if (e.vpc.name == plan.canary) == canary]

    def targets(self, eps: list[Endpoint]) -> list[probe.Target]:
        """One read per (endpoint, storage node, family) of a known metadata document."""
        p = self.dep.plan
        dscp = p.spec.priority_dscp  # the queues' first class, where the topology has queues
        out = []
        for ep in eps:
            for node in p.storage_nodes:
                expect = storage.meta_document(p, node, 0).encode()
                out.append(probe.Target(ep.ns, node.addr, PROBE_PATH, expect, dscp=dscp))
                if ep.addr6 and node.addr6:
                    out.append(probe.Target(ep.ns, node.addr6, PROBE_PATH, expect, dscp=dscp))
        return out

    # ---- parity -------------------------------------------------------------------------------

    def parity(self, plan: Plan) -> list[str]:
        """Why the target gateways cannot take traffic (empty: they can)."""
        problems: list[str] = []
        known = kinds.names()
        for side in (plan.source, plan.target):
            if side not in known:
                problems.append(f"no gateway kind {side!r} (known: {', '.join(known)})")
        if plan.canary is not None and plan.canary not in {v.name for v in
                                                           self.dep.plan.spec.vpcs}:
            problems.append(f"no VPC {plan.canary!r} for the canary")
        if problems:
            return problems
        src, dst = self.sides(plan)
        if not src or not dst:
            return [f"the deployment has {len(src)} {plan.source} and {len(dst)} "
                    f"{plan.target} gateways: a migration needs both"]
        state = st.load()
        for gw in dst:
            if kinds.get(gw.kind).attaches:
                if not (state and state.fastpath.get(gw.name)):
                    problems.append(f"{gw.name}: no fast path attached")
                    continue
                problems += self._map_drift(gw)
        problems += self._sessions(dst)
        return problems

    def _map_drift(self, gw: Gateway) -> list[str]:
        """The gateway's maps against the controller's current intent, compiled as its agent
        compiles it (the agent's stable ids, the gateway's own ifindexes)."""
        try:
            store = open_store(control_plane.store_url())
            try:
                items, revision = store.get_prefix(INTENT)
            finally:
                store.close()
            cluster = join_objects({k[len(INTENT):]: v for k, v in items.items()})
            ids = None
            state_file = control_plane.agent_state_file(gw)
            if state_file.exists():
                ids = Ids.from_json(json.dumps(json.loads(state_file.read_text())["ids"]))
            with in_netns(gw.ns):
                desired = compile_gateway(cluster, gw.name, socket.if_nametoindex, ids)
            diff = drift(desired.entries, gw.pin_dir)
        except (OSError, ValueError, KeyError) as exc:
            return [f"{gw.name}: cannot compare its maps with the intent: {exc}"]
        if not diff:
            return []
        what = ", ".join(f"{m} {n}" for m, n in sorted(diff.items()))
        return [f"{gw.name}: maps in the kernel differ from what intent revision {revision} "
                f"compiles to ({what} entries to change)"]

    def _sessions(self, gws: list[Gateway]) -> list[str]:
        """BGP sessions not Established and BFD sessions not up, at both routers."""
        p = self.dep.plan
        problems = []
        for ns, attr in ((p.compute_router_ns, "compute_addr"), (p.storage_router_ns,
                                                                 "storage_addr")):
            up = frr.established_peers(self.show(ns, "bgpd", "show bgp summary json"))
            bfd = _bfd_up(self.show(ns, "bfdd", "show bfd peers json"))
            for gw in gws:
                addr = getattr(gw, attr)
                if addr not in up:
                    problems.append(f"{gw.name}: BGP session with {ns} is not Established")
                if addr not in bfd:
                    problems.append(f"{gw.name}: BFD session with {ns} is not up")
        return problems

    # ---- canary -------------------------------------------------------------------------------

    def set_canary(self, plan: Plan, on: bool) -> None:
        """Move the canary prefixes to the target gateways (on) or back (off), make before
        break."""
        prefixes = self.canary_prefixes(plan)
        if not prefixes or (on == self.canary_on and on):
            self.canary_on = on and bool(prefixes)
            return
        src, dst = self.sides(plan)
        first, then = (dst, src) if on else (src, dst)
        self.configure(first, frr.prefix_commands([], prefixes, False))
        self._wait(dict.fromkeys(prefixes, ({f"g{g.index}" for g in first}, None)),
                   want_present=True, what="canary prefixes announced")
        if on or not self._weight_active():
            self.configure(then, frr.prefix_commands([], prefixes, True), check=False)
            keep = first
        else:  # off mid-shift: the canary prefixes follow the weights with the rest from now on
            keep = src + dst
        self._wait(dict.fromkeys(prefixes, ({f"g{g.index}" for g in keep}, None)),
                   what="canary prefixes moved")
        self.canary_on = on

    def _weight_active(self) -> bool:
        return bool(self.last_move.get("weight_new"))

    def probe_canary(self, plan: Plan) -> dict[str, float]:
        """Canary reads vs production reads of the same documents."""
        canary = probe.run_round(self.targets(self.endpoints(plan, canary=True)))
        for o in canary:
            if not o.ok:
                self.log(f"canary probe failed after {o.ms:.0f} ms: {o.error}")
        legacy = probe.run_round(self.targets(self.endpoints(plan, canary=False)))
        base = max(probe.p99_ms(legacy), LATENCY_FLOOR_MS)
        self.baseline_p99_ms = base
        return {"canary_errors": float(sum(not o.ok for o in canary)),
                "canary_latency_factor": round(probe.p99_ms(canary) / base, 3)}

    # ---- weights ------------------------------------------------------------------------------

    def set_weight(self, plan: Plan, weight_new: int) -> float:
        """Move production traffic to `weight_new` percent on the target gateways; ms from the
        first command until both routers' kernels hold the weights. Commands and watch run
        real-time (`MOVE_RT_PRIORITY`)."""
        with _realtime(MOVE_RT_PRIORITY):
            return self._set_weight(plan, weight_new)

    def _set_weight(self, plan: Plan, weight_new: int) -> float:
        src, dst = self.sides(plan)
        to_compute, to_storage = self.production(plan)
        v6 = any(":" in x for x in to_storage)
        t0 = self.clock()
        announce = frr.prefix_commands(to_compute, to_storage, False)
        expect: dict[str, tuple[set[str], float | None]]
        if weight_new == 0:
            # Back to the source alone: undrained and unweighted first, then the target leaves.
            self.configure(src, frr.weight_commands(None, False, v6) + announce)
            self.configure(dst, frr.prefix_commands(to_compute, to_storage, True)
                           + frr.weight_commands(None, False, v6), check=False)
            want = {f"g{g.index}" for g in src}
            expect = dict.fromkeys(to_compute + to_storage, (want, None))
        elif weight_new < 100:
            # The source's weight first: a path without link bandwidth would make the routers
            # fall back to plain ECMP over every gateway for a moment.
            self.configure(src, frr.weight_commands(
                frr.link_bandwidth(100 - weight_new, len(src)), False, v6))
            self.configure(dst, frr.weight_commands(
                frr.link_bandwidth(weight_new, len(dst)), False, v6) + announce)
            want = {f"g{g.index}" for g in src + dst}
            expect = dict.fromkeys(to_compute + to_storage, (want, float(weight_new)))
        else:
            self.configure(dst, frr.weight_commands(frr.link_bandwidth(100, len(dst)), False, v6)
                           + announce)
            self.configure(src, frr.weight_commands(None, True, v6))
            want = {f"g{g.index}" for g in dst}
            expect = dict.fromkeys(to_compute + to_storage, (want, None))
        announced = self.clock()
        self._wait(expect, what=f"kernel weights of step {weight_new}%",
                   new={f"g{g.index}" for g in dst})
        done = self.clock()
        self.last_move = {"weight_new": weight_new,
                          "announce_ms": round((announced - t0) * 1000, 1),
                          "converge_ms": round((done - t0) * 1000, 1),
                          "after_announce_ms": round((done - announced) * 1000, 1)}
        self._record_active(plan, weight_new)
        return (done - t0) * 1000

    def _record_active(self, plan: Plan, weight_new: int) -> None:
        state = st.load()
        if state is None:
            return
        state.active = plan.source if weight_new == 0 else kinds.ALL
        st.save(state)

    def _wait(self, expect: dict[str, tuple[set[str], float | None]], what: str,
              new: set[str] | None = None, want_present: bool = False,
              timeout: float = 30.0) -> None:
        """Poll both routers' kernels (1 ms apart) until every prefix has the expected next-hop
        devices (a superset with want_present) and, where given, the target's share."""
        fibs = self.fibs()
        start = self.clock()
        while True:
            got: dict[str, dict[str, int]] = {}
            read = True
            try:
                for fib in fibs:
                    got.update(fib.weights(set(expect)))
            except OSError:
                self._close_fibs()  # a router's socket broke: new ones for the next poll
                read = False
            if read and all(_matches(got.get(x, {}), devs, pct, new or set(), want_present)
                   for x, (devs, pct) in expect.items()):
                return
            if self.clock() - start > timeout:
                raise MigrationDriverError(f"timed out waiting for {what}: {got}")
            self.sleep(0.001)
            fibs = self.fibs()

    # ---- guards -------------------------------------------------------------------------------

    def observe(self, plan: Plan) -> dict[str, float]:
        """Guard readings: probe errors and p99 factor, target drops, sessions down."""
        src, dst = self.sides(plan)
        outcomes = probe.run_round(self.targets(self.endpoints(plan, canary=False)))
        for o in outcomes:
            if not o.ok:
                self.log(f"guard probe failed after {o.ms:.0f} ms: {o.error}")
        if self.baseline_p99_ms is None:
            self.baseline_p99_ms = max(probe.p99_ms(outcomes), LATENCY_FLOOR_MS)
        drops = self._drops(dst)
        live = [] if self._retired else src
        return {"errors": float(sum(not o.ok for o in outcomes)),
                "small_p99_factor": round(probe.p99_ms(outcomes) / self.baseline_p99_ms, 3),
                "drops": float(drops),
                "sessions_down": float(len(self._sessions(live + dst))),
                "agents_unhealthy": float(sum(not self._agent_ok(g) for g in dst
                                              if kinds.get(g.kind).attaches))}

    def _agent_ok(self, gw: Gateway) -> bool:
        """Whether `gw`'s agent is healthy. An endpoint that refuses, errs or reports itself
        unhealthy counts at once; one that is only slow counts when it was slow at the previous
        reading too. On a CI box at load average 31, both agents (normal priority, sharing a
        CPU with the workload) missed one 3 s deadline at the same reading, answered at the
        next, and the single miss rolled a healthy migration back; a hung agent still counts
        one reading later."""
        why, slow = _agent_problem(gw)
        was_slow = gw.name in self._agent_slow
        self._agent_slow.discard(gw.name)
        if slow:
            self._agent_slow.add(gw.name)
            if not was_slow:
                self.log(f"agent of {gw.name}: {why} (counts if it is slow again next reading)")
                return True
        if why:
            self.log(f"agent of {gw.name}: {why}")
        return not why

    def _drops(self, gws: list[Gateway]) -> int:
        """Fast-path drops of `gws` since the previous reading (all drop_* reasons)."""
        total = 0
        for gw in gws:
            if not kinds.get(gw.kind).attaches:
                continue
            now = _reason_packets(gw, "drop_")
            total += max(0, now - self._drops0.get(gw.name, now))
            self._drops0[gw.name] = now
        return total

    def source_packets(self, plan: Plan) -> int:
        """IP datagrams the source gateways' kernels have forwarded (both families)."""
        src, _ = self.sides(plan)
        return sum(forwarded_packets(self.dep, gw) for gw in src)

    def retire(self, plan: Plan) -> list[str]:
        """Withdraw the source gateways; the target announces without weights."""
        src, dst = self.sides(plan)
        to_compute, to_storage = frr.gateway_prefixes(self.dep.plan)
        v6 = any(":" in x for x in to_storage)
        self.configure(src, frr.prefix_commands(to_compute, to_storage, True), check=False)
        self.configure(src + dst, frr.weight_commands(None, False, v6))
        self._wait({x: ({f"g{g.index}" for g in dst}, None) for x in to_compute + to_storage},
                   what="source gateways withdrawn")
        self._retired = True
        state = st.load()
        if state is not None:
            state.active = plan.target
            st.save(state)
        return [g.name for g in src]


def _bfd_up(peers_json: str) -> set[str]:
    """Peer addresses whose BFD session is up (`show bfd peers json`)."""
    try:
        data = json.loads(peers_json or "[]")
    except json.JSONDecodeError:
        return set()
    return {str(x.get("peer")) for x in data if isinstance(x, dict) and x.get("status") == "up"}


def _matches(weights: dict[str, int], devices: set[str], pct: float | None, new: set[str],
             want_present: bool) -> bool:
    if want_present:
        return devices <= set(weights)
    if set(weights) != devices:
        return False
    return pct is None or abs(share(weights, new) - pct) <= SHARE_TOLERANCE


#: How long an agent may take to answer on its metrics endpoint: it runs at normal priority
#: beside the workload on a saturated two-core box, where one second was missed (a false breach).
AGENT_TIMEOUT_S = 3.0


def _agent_problem(gw: Gateway) -> tuple[str, bool]:
    """Why the gateway's agent is not healthy ('' when it answers on its metrics endpoint and
    last reported itself healthy), and whether the only problem is that it did not answer in
    time (`AGENT_TIMEOUT_S`)."""
    try:
        with urllib.request.urlopen(f"http://{control_plane.agent_metrics(gw)}/metrics",
                                    timeout=AGENT_TIMEOUT_S) as resp:
            if resp.status != 200:
                return f"metrics endpoint answered {resp.status}", False
            resp.read()
    except TimeoutError as exc:
        return f"metrics endpoint: {exc}", True
    except urllib.error.URLError as exc:
        return f"metrics endpoint: {exc}", isinstance(exc.reason, TimeoutError)
    except OSError as exc:
        return f"metrics endpoint: {exc}", False
    health = control_plane.agent_status(gw).get("health")
    return ("", False) if health == "ok" else (f"reports health {health!r}", False)


def _reason_packets(gw: Gateway, prefix: str) -> int:
    """Packets counted under the fast-path reasons whose name starts with `prefix`. Only the
    counter map is opened, and closed at once: read twice a second for minutes, a whole
    GatewayMaps per read left its map fds to the garbage collector and ran out of files."""
    m = BpfMap.from_pinned(gw.pin_dir / "maps" / "reason_stats")
    try:
        stats = GatewayMaps({"reason_stats": m}).reason_stats()
    finally:
        m.close()
    return sum(pk for r, (pk, _b) in stats.items() if r.name.lower().startswith(prefix))


def forwarded_packets(dep: Deployment, gw: Gateway) -> int:
    """Packets a gateway forwarded for the VPCs, not its own BGP and BFD nor the routers'
    fast-reroute echoes: the fast path's fwd_* counters, or a kernel gateway's nftables
    `forwarded` counters (legacy_gateway.forwarded_packets)."""
    if kinds.get(gw.kind).attaches:
        return _reason_packets(gw, "fwd_")
    out = dep.ex.output(["ip", "netns", "exec", gw.ns, "nft", "-j", "list", "counters"])
    return legacy_gateway.forwarded_packets(out)


# ---- the product's driver on the emulator --------------------------------------------------
#
# Once the emulator's crosszone gateways take their routing from their agents (issue 23,
# deliverable 6), `crosszone migrate` on the emulator runs the product's AgentDriver: the
# crosszone side through routing objects and their agents, the legacy side through the
# product's command adapter (vtysh in the legacy gateways' namespaces). What stays here is what
# only the emulator has: its own probe rounds (until `crosszone probe` runs in its host
# namespaces), the routers' kernels as an independent measure of each move (`kernel_ms`, next
# to the product's `converge_ms`), the routers' standby of the crosszone gateways, and the
# deployment state's active kind.


@dataclass
class EmulatorProbes:
    """agent_driver.Probes from the emulator's own reads: the canary VPC's endpoints (role
    canary) or every other endpoint (production), each to every storage node, both families."""

    emu: EmulatorDriver
    canary: Callable[[], str | None]
    log: Callable[[str], None] = lambda _m: None

    def read(self, role: str) -> ProbeRound | None:
        """One round of `role`'s reads now (None: the role has no endpoint)."""
        canary = self.canary()
        plan = Plan(canary=canary)
        if role == "canary" and canary is None:
            return None
        eps = self.emu.endpoints(plan, canary=role == "canary")
        if not eps:
            return None
        outcomes = probe.run_round(self.emu.targets(eps))
        for o in outcomes:
            if not o.ok:
                self.log(f"{role} probe failed after {o.ms:.0f} ms: {o.error}")
        return ProbeRound(len(outcomes), sum(not o.ok for o in outcomes), probe.p99_ms(outcomes))


def kernel_expectation(emu: EmulatorDriver, plan: Plan, weight_new: int, canary_on: bool
                       ) -> tuple[dict[str, tuple[set[str], float | None]], set[str]]:
    """What the routers' kernels hold once a move to `weight_new` converged: prefix -> (next
    hop devices, the target's share or None), and the target's devices. The canary's prefixes
    stay with the target while the canary is on (the steps move the others)."""
    src, dst = emu.sides(plan)
    to_compute, to_storage = frr.gateway_prefixes(emu.dep.plan)
    canary = set(emu.canary_prefixes(plan)) if canary_on else set()
    moved = [x for x in to_compute + to_storage if x not in canary]
    s, d = {f"g{g.index}" for g in src}, {f"g{g.index}" for g in dst}
    if weight_new <= 0:
        want: tuple[set[str], float | None] = (s, None)
    elif weight_new < 100:
        want = (s | d, float(weight_new))
    else:
        want = (d, None)
    return dict.fromkeys(moved, want), d


@dataclass
class EmulatedAgentDriver(AgentDriver):
    """The product's driver on the emulator, with the routers' kernels timed beside it."""

    emu: EmulatorDriver | None = None
    #: every move: {"t", "weight_new", "announce_ms", "applied_ms", "converge_ms", "share",
    #: "share_reached", "kernel_ms"} (bench migrate's step lines)
    moves: list[dict[str, Any]] = field(default_factory=list)
    kernel_timeout_s: float = 30.0

    def set_weight(self, plan: Plan, weight_new: int) -> float:
        """The product's move, and meanwhile the time until both routers' kernels hold its
        weights, from the same start (`kernel_ms`, None when they did not within
        kernel_timeout_s)."""
        assert self.emu is not None
        expect, new = kernel_expectation(self.emu, plan, weight_new, self._canary_on)
        t0, wall = time.monotonic(), time.time()
        got: dict[str, float] = {}

        emu = self.emu

        def watch() -> None:
            # netlink sockets of this thread's own: in the first bench run through this driver
            # only the first move's watch read the routers (every later one read nothing, {}),
            # with sockets opened by an earlier watch thread that had ended
            emu._close_fibs()
            try:
                emu._wait(expect, f"kernel weights of step {weight_new}%", new=new,
                          timeout=self.kernel_timeout_s)
                got["ms"] = (time.monotonic() - t0) * 1000
            except (MigrationDriverError, OSError) as exc:
                self.log(f"routers' kernels: {exc}")
            finally:
                emu._close_fibs()
        th = threading.Thread(target=watch, name="kernel-watch", daemon=True)
        th.start()
        try:
            ms = super().set_weight(plan, weight_new)
        finally:
            th.join(timeout=self.kernel_timeout_s + 5)
        self.last_move["kernel_ms"] = round(got["ms"], 1) if "ms" in got else None
        self.moves.append({"t": wall, **self.last_move})
        emu._record_active(plan, weight_new)
        return ms

    def retire(self, plan: Plan) -> list[str]:
        """The product's retirement, then the deployment's active kind is the target."""
        out = super().retire(plan)
        state = st.load()
        if state is not None:
            state.active = plan.target
            st.save(state)
        return out

    def close(self) -> None:
        """Close the emulator's sessions and netlink sockets."""
        if self.emu is not None:
            self.emu.close()


def agents_manage_routing(dep: Deployment, store: Store | None = None) -> bool:
    """Whether every crosszone gateway's agent reports that it owns its gateway's routing
    (then the product's driver can run the migration)."""
    xgws = [g for g in dep.plan.gateways if kinds.get(g.kind).attaches]
    if not xgws:
        return False
    if store is None:  # the agents' store: the emulation's controller's
        if not (control_plane.CONTROL_DIR / "store.db").exists():
            return False
        store = open_store(control_plane.store_url())
    items, _ = store.get_prefix(STATUS)
    for gw in xgws:
        try:
            doc = json.loads(items.get(STATUS + gw.name, b"{}"))
        except ValueError:
            return False
        if not isinstance(doc, dict) or (doc.get("routing") or {}).get("mode") != "managed":
            return False
    return True


def legacy_adapter() -> LegacySide:
    """The emulator's legacy-gateway actions (vtysh in their namespaces), in this process:
    crosszone_lab.emulate.legacy_adapter_commands.InProcessAdapter (why not the command
    adapter's process per action: its docstring)."""
    return legacy_adapter_commands.InProcessAdapter()


def take_crosszone_in(dep: Deployment, store: Store, driver: AgentDriver) -> None:
    """Before a migration from legacy: the crosszone gateways go on standby by their routing
    objects (sessions up, nothing announced), then the routers take their routes (they kept
    them on standby at the routers until now): from here the migration moves their traffic."""
    xgws = [g for g in dep.plan.gateways if kinds.get(g.kind).attaches]
    rev = standby(store, [g.name for g in xgws])
    driver._wait_applied({g.name: rev for g in xgws}, "standby")
    accept = getattr(frr, "router_accept_ops", None)
    if accept is None:
        raise MigrationDriverError("the emulator's routers cannot take an agent's gateway yet")
    for gw in xgws:
        dep.ex.apply(accept(dep.plan, gw, True))


def intent_vpc_name(name: str) -> str:
    """The cluster intent's name of a topology's VPC (control_plane.cluster_intent)."""
    return f"vpc-{name}"


def emulated_agent_driver(dep: Deployment, store: Store, log: Callable[[str], None]
                          ) -> EmulatedAgentDriver:
    """The product's driver over the emulated deployment `dep` (see above)."""
    emu = EmulatorDriver(dep, log=log)
    xgws = [g.name for g in dep.plan.gateways if kinds.get(g.kind).attaches]
    lgws = [g.name for g in dep.plan.gateways if not kinds.get(g.kind).attaches]

    def canary() -> str | None:
        state = read_state(store)
        return state.the_plan.canary if state.plan else None
    # the agents read their routing objects from the emulation's controller store; the
    # migration's state may be kept elsewhere (`--store`)
    agents_store = open_store(control_plane.store_url())
    driver = EmulatedAgentDriver(agents_store, legacy_adapter(), lgws, xgws,
                                 EmulatorProbes(emu, canary, log), log=log, emu=emu,
                                 state_store=store, intent_vpc=intent_vpc_name)
    state = st.load()
    if state is not None and state.active == legacy_gateway.KIND.name:
        take_crosszone_in(dep, agents_store, driver)
    return driver
