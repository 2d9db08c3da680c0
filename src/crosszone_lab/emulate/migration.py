"""The emulator's part of a migration: the product's driver over the emulated deployment.

`crosszone migrate` on the emulator runs the product's `AgentDriver` (migrate/agent_driver.py),
exactly as on real gateways: the crosszone gateways through routing objects and their agents
(which own their FRR configuration), the legacy gateways through the legacy adapter's actions
(`legacy_adapter_commands`, vtysh in their namespaces). What this module adds is what only the
emulator has (`EmulatedAgentDriver`):

- the routers' kernels, read over netlink (`fib_watch`), timed beside every move as an
  independent measure (`kernel_ms`, next to the product's own `converge_ms`);
- the product's probes (`crosszone probe`) run in its hosts' namespaces, with the canary VPC
  of the migration at hand (`emulate/probes.py`: started at parity and when a runner
  attaches);
- the routers' standby of the crosszone gateways, lifted once the gateways are on standby by
  routing object (`take_crosszone_in`), and the deployment state's active kind.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crosszone.fastpath.bpf_map import BpfMap
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.migrate.agent_driver import AgentDriver, LegacySide, standby
from crosszone.migrate.engine import ACTIVE, read_state
from crosszone.migrate.plan import Plan
from crosszone.migrate.probe_verdicts import StoreProbes
from crosszone.store.store import STATUS, Store, open_store
from crosszone_lab.emulate import (
    control_plane,
    frr,
    kinds,
    legacy_adapter_commands,
    legacy_gateway,
    probes,
)
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.deploy import Deployment
from crosszone_lab.emulate.fib_watch import RouterFib, share
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.emulate.topology import Gateway

#: Share (percentage points) by which a router's kernel weights may differ from the step's:
#: FRR rounds each next hop's weight to an integer percent of the total.
SHARE_TOLERANCE = 2.5


class MigrationDriverError(RuntimeError):
    """The emulator could not do what a migration step needs."""


@dataclass
class EmulatorView:
    """What only the emulator can read during a migration: both routers' kernels (netlink).
    It moves nothing: the product's driver does (EmulatedAgentDriver, below)."""

    dep: Deployment
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _fibs: list[RouterFib] = field(default_factory=list)

    def close(self) -> None:
        """Close the netlink sockets."""
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

    # ---- the routers' kernels -----------------------------------------------------------------

    def _record_active(self, plan: Plan, weight_new: int) -> None:
        state = st.load()
        if state is None:
            return
        state.active = plan.source if weight_new == 0 else kinds.ALL
        st.save(state)

    def _wait(self, expect: dict[str, tuple[set[str], float | None]], what: str,
              new: set[str] | None = None, want_present: bool = False,
              timeout: float = 30.0, stop: Callable[[], bool] | None = None) -> None:
        """Poll both routers' kernels (1 ms apart) until every prefix has the expected next-hop
        devices (a superset with want_present) and, where given, the target's share; `stop`
        (polled) ends the wait early with an error."""
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
            if stop is not None and stop():
                raise MigrationDriverError(f"stopped waiting for {what}: a gateway was lost")
            self.sleep(0.001)
            fibs = self.fibs()


def _matches(weights: dict[str, int], devices: set[str], pct: float | None, new: set[str],
             want_present: bool) -> bool:
    if want_present:
        return devices <= set(weights)
    if set(weights) != devices:
        return False
    return pct is None or abs(share(weights, new) - pct) <= SHARE_TOLERANCE


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


def kernel_expectation(emu: EmulatorView, plan: Plan, weight_new: int, canary_on: bool,
                       lost: frozenset[str] = frozenset()
                       ) -> tuple[dict[str, tuple[set[str], float | None]], set[str]]:
    """What the routers' kernels hold once a move to `weight_new` converged: prefix -> (next
    hop devices, the target's share or None), and the target's devices. The canary's prefixes
    stay with the target while the canary is on (the steps move the others); gateways the
    migration lost (drained) are in neither side."""
    src, dst = ([g for g in side if g.name not in lost] for side in emu.sides(plan))
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

    emu: EmulatorView | None = None
    #: every move: {"t", "weight_new", "announce_ms", "applied_ms", "converge_ms", "share",
    #: "share_reached", "kernel_ms"} (bench migrate's step lines)
    moves: list[dict[str, Any]] = field(default_factory=list)
    kernel_timeout_s: float = 30.0

    def parity(self, plan: Plan) -> list[str]:
        """The probes for this plan's canary running (emulate/probes.py), then the product's
        parity."""
        assert self.emu is not None
        try:
            started = probes.ensure(self.emu.dep.plan, self.store, plan.canary)
        except DeployError as exc:
            return [f"probes: {exc}"]
        if started:
            self.log(f"probes started: {', '.join(started)}")
        return super().parity(plan)

    def set_weight(self, plan: Plan, weight_new: int) -> float:
        """The product's move, and meanwhile the time until both routers' kernels hold its
        weights, from the same start (`kernel_ms`, None when they did not within
        kernel_timeout_s)."""
        assert self.emu is not None
        expect, new = kernel_expectation(self.emu, plan, weight_new, self._canary_on,
                                         frozenset(self.lost))
        lost0 = len(self.lost)
        t0, wall = time.monotonic(), time.time()
        got: dict[str, float] = {}

        emu = self.emu

        def watch() -> None:
            # netlink sockets of this thread's own: in the first bench run through this driver
            # only the first move's watch read the routers (every later one read nothing, {}),
            # with sockets opened by an earlier watch thread that had ended
            emu._close_fibs()
            try:
                # a gateway lost during the move: the kernels will not hold this move's set,
                # and the runner rolls back at once instead of waiting out the timeout
                emu._wait(expect, f"kernel weights of step {weight_new}%", new=new,
                          timeout=self.kernel_timeout_s, stop=lambda: len(self.lost) > lost0)
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
    emu = EmulatorView(dep)
    xgws = [g.name for g in dep.plan.gateways if kinds.get(g.kind).attaches]
    lgws = [g.name for g in dep.plan.gateways if not kinds.get(g.kind).attaches]

    # the agents read their routing objects, and the probes write their verdicts, in the
    # emulation's controller store; the migration's state may be kept elsewhere (`--store`)
    agents_store = open_store(control_plane.store_url())
    driver = EmulatedAgentDriver(agents_store, legacy_adapter(), lgws, xgws,
                                 StoreProbes(agents_store), log=log, emu=emu,
                                 state_store=store, intent_vpc=intent_vpc_name)
    migration = read_state(store)
    if migration.plan and not migration.error and migration.state in ACTIVE:  # attaching
        probes.ensure(dep.plan, agents_store, migration.the_plan.canary)
    state = st.load()
    if state is not None and state.active == legacy_gateway.KIND.name:
        take_crosszone_in(dep, agents_store, driver)
    return driver
