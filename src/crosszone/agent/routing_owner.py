"""The agent's ownership of its host's routing: keep FRR equal to the intent, around the maps.

The agent calls `around(rec, apply_maps, core)` for every reconcile (agent._guarded):

1. before the maps change (`core` is the intent's new core object, None when it did not
   change), whatever the new intent no longer announces is withdrawn first: the VPCs that
   leave, and those whose storage-facing prefixes change. Routers stop sending replies to a VPC
   before its maps go (withdrawn before removal);
2. the maps are applied (the reconciler);
3. from what the maps now hold (the reconciler's applied objects, which after a rejected
   revision are the previous ones), the full configuration is rendered and applied: a VPC's
   prefixes are announced only once its maps are programmed (announced after programming),
   and a rejected revision gets back what step 1 withdrew.

Only the difference reaches FRR (`frr_apply`): an unchanged intent renders the same text and
applies nothing. A failed apply is reported (status, `crosszone_routing_apply_errors_total`)
and tried again every `retry_every` seconds; it never holds back the maps (a VPC the operator
removed has nowhere to go either way). A gateway whose intent has no `bgp:` is left alone
("unmanaged"): the operator runs its routing. Every `check_every` seconds (60) the same text
is applied again, which corrects a configuration changed behind the agent's back (counted in
`drift_corrections`); when nothing differs that costs one frr-reload.py comparison.

`state` is the migration's per-gateway routing state (frr_config.RoutingState): the agent
reads its gateway's routing object from the store (`routing/<gateway>`, store/routing.py,
written by the migration's runner) and hands it to `set_routing_object`; without one it is
the default (everything announced, no weight). The object's revision is reported once FRR
holds it (status `routing.state_revision`): that is what the runner waits for. The state is
rendered into the configuration file too, so a restarted bgpd comes back with the step's
weight.

Fail closed (issue 25): when the fast path is no longer the program the agent loaded
(agent/fastpath_guard.py), `fail_closed()` shuts every BGP neighbour at once: the commands go
straight to bgpd's vty socket (frr_vty, a few ms; vtysh alone takes 200 to 380 ms to start),
without waiting for an apply the main loop may be running (bgpd runs one command at a time),
then the closed configuration (`RoutingState.shutdown`) is applied and written under the
owner's lock like any other, so frr.conf, the drift check and a restarted bgpd keep it shut.
A shut neighbour (a Cease NOTIFICATION) took the router's kernel routes via the gateway away in
90 ms median against 162 ms for withdrawing the announcements (docs/measurements.md).
`reopen()` applies the configuration without the shutdown once the fast path is back.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Literal, Protocol, TypeVar, cast

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from crosszone.agent.frr_apply import Applier, ApplyError, Changes, FrrReloadApplier, FrrTarget
from crosszone.agent.frr_config import Rendered, RenderError, RoutingState, facing_prefixes, render
from crosszone.agent.frr_vty import run_commands
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.schema import Cluster
from crosszone.store.objects import CORE, join_objects
from crosszone.store.routing import GatewayRouting

log = logging.getLogger("crosszone.agent.routing")
T = TypeVar("T")


class _Applied(Protocol):
    """What the owner reads of the reconciler: the objects and revision of its maps."""

    objects: dict[str, bytes]
    revision: int


class RoutingOwner(Collector):
    """Renders and applies one gateway's FRR configuration around its map changes."""

    def __init__(self, gateway: str, applier: Applier, state: RoutingState | None = None,
                 hostname: str | None = None, log_file: str | None = None,
                 sessions: Callable[[], dict[str, Any]] | None = None,
                 now: Callable[[], float] = time.monotonic, retry_every: float = 5.0,
                 check_every: float = 60.0,
                 fast: Callable[[list[str]], object] | None = None) -> None:
        self.gateway = gateway
        self.applier = applier
        # sends vty commands to bgpd at once (frr_vty.run_commands); None: vtysh-free path
        # unavailable, fail_closed goes through the applier alone
        self.fast = fast
        # one FRR apply at a time: the main loop's (around) and the fail-closed thread's
        self.lock = threading.RLock()
        self.closed = False  # the fast path failed: every neighbour shut
        self.state = state or RoutingState()
        self.hostname, self.log_file = hostname, log_file
        self.sessions = sessions
        self.now, self.retry_every, self.check_every = now, retry_every, check_every
        self.mode = "starting"          # managed | unmanaged | error | starting
        self.message = ""
        self.applied: Rendered | None = None     # what FRR holds, as far as we know
        self.applied_revision: int | None = None
        self.last_changes = Changes()
        self.applies = 0
        self.errors = 0
        self.drift_corrections = 0
        self._checked_at = 0.0
        self._clusters: dict[bytes, Cluster | None] = {}
        self._applied_core: bytes | None = None  # the core object FRR's announcements follow
        self._done_key: tuple[bytes, RoutingState, int | None, bool] | None = None
        self._retry_at = 0.0
        # the routing object's revision that `state` comes from (None: no object), the one
        # FRR holds, and why the last object read was refused ('' when it was not)
        self.state_revision: int | None = None
        self.applied_state_revision: int | None = None
        self.state_error = ""

    # ---- control ---------------------------------------------------------------------------

    def set_state(self, state: RoutingState, revision: int | None = None) -> None:
        """A new routing state (applied at the next reconcile); revision: the routing
        object's it comes from."""
        self.state, self.state_revision = state, revision

    def set_routing_object(self, obj: GatewayRouting | None) -> None:
        """The gateway's routing object from the store (None: there is none, the default)."""
        self.state_error = ""
        if obj is None:
            self.set_state(RoutingState())
            return
        canary = cast(Literal["on", "off", "only"], obj.canary)  # checked by GatewayRouting
        self.set_state(RoutingState(withdraw=obj.withdraw, canary=canary,
                                    canary_vpcs=frozenset(obj.canary_vpcs),
                                    bandwidth_mbps=obj.bandwidth_mbps,
                                    graceful_shutdown=obj.graceful_shutdown), obj.revision)

    def refuse_routing_object(self, why: str) -> None:
        """The stored routing object is not one: keep the state FRR holds, say why."""
        if why != self.state_error:
            log.warning("gateway %s: routing object refused, keeping the last one: %s",
                        self.gateway, why)
        self.state_error = why[:1000]

    def around(self, rec: _Applied, apply_maps: Callable[[], T], core: bytes | None) -> T:
        """Withdraw what `core` drops, apply the maps, then bring FRR to what they hold.

        Routing never fails the maps' reconcile: an unforeseen error here (a bug) is logged
        and reported as a routing error, and the revision counts as applied to the maps."""
        if core is not None:
            self._safely(lambda: self.before(core))
        try:
            return apply_maps()
        finally:
            self._safely(lambda: self.after(rec))

    def _safely(self, step: Callable[[], None]) -> None:
        try:
            with self.lock:
                step()
        except Exception as exc:
            log.exception("gateway %s: routing", self.gateway)
            self._failed(f"internal error: {type(exc).__name__}: {exc}")

    def _cluster(self, core: bytes | None) -> Cluster | None:
        """The cluster of a core object (None when it does not make one); one parse per
        distinct object (the applied one and the one coming are kept)."""
        if core is None:
            return None
        if core not in self._clusters:
            try:
                cluster: Cluster | None = join_objects({CORE: core})
            except InvalidIntentError:
                cluster = None
            keep = self._applied_core
            self._clusters = {k: v for k, v in self._clusters.items() if k == keep}
            self._clusters[core] = cluster
        return self._clusters[core]

    def _render(self, cluster: Cluster, programmed: set[str] | None = None) -> Rendered | None:
        state = replace(self.state, shutdown=True) if self.closed else self.state
        return render(cluster, self.gateway, state, programmed=programmed,
                      hostname=self.hostname, log_file=self.log_file)

    # ---- fail closed -----------------------------------------------------------------------

    def fail_closed(self) -> str:
        """Take the gateway out of routing at once (every neighbour shut); what was done, for
        the agent's message. Safe from any thread, also while the main loop applies."""
        self.closed = True
        gw = self._bgp_gateway()
        if gw is None:
            return ("routing is unmanaged (the intent has no bgp: for this gateway, or it was "
                    "never applied): cannot withdraw, the operator must take this gateway out")
        assert gw.bgp is not None
        peers = [str(p.address) for p in gw.bgp.peers]
        said = []
        if self.fast is not None:
            t0 = time.monotonic()
            try:
                self.fast(["configure terminal", f"router bgp {gw.bgp.asn}",
                           *[f"neighbor {a} shutdown" for a in peers], "end"])
                said.append(f"BGP neighbours {', '.join(peers)} shut in "
                            f"{(time.monotonic() - t0) * 1000:.0f} ms")
            except Exception as exc:  # the applier below tries again, the slow way
                log.warning("gateway %s: fail-closed via bgpd's vty socket: %s", self.gateway,
                            exc)
                said.append(f"direct shutdown failed ({exc})")
        if not said:
            said.append("no direct path to bgpd: the closed configuration follows (settle)")
        return "; ".join(said)

    def settle(self) -> str:
        """Apply and write the configuration of the current closed/open state under the lock
        (after fail_closed: persists the shutdown, and undoes an apply that raced it)."""
        if self._bgp_gateway() is None:
            return ""
        with self.lock:
            ok = self._reapply()
        return "" if ok else f"configuration not applied yet: {self.message}"

    def reopen(self) -> str:
        """The fast path is back: apply the configuration without the shutdown (its maps are
        programmed, so announcing again is make-before-break); what was done."""
        self.closed = False
        if self._bgp_gateway() is None:
            return "routing is unmanaged: nothing to announce again"
        why = self.settle()
        return why or "BGP neighbours opened again"

    def _bgp_gateway(self) -> Any:
        """This gateway's intent entry when the agent manages its routing, else None."""
        if self.mode == "unmanaged" or self.applied is None:
            return None
        cluster = self._cluster(self._applied_core)
        if cluster is None:
            return None
        try:
            gw = cluster.gateway(self.gateway)
        except KeyError:
            return None
        return gw if gw.bgp is not None else None

    def _reapply(self) -> bool:
        """Render the applied intent with the current state and apply it (the caller holds
        the lock)."""
        cluster = self._cluster(self._applied_core)
        if cluster is None:
            return False
        try:
            target = self._render(cluster)
        except (KeyError, RenderError) as exc:
            self._failed(f"cannot render: {exc}")
            return False
        if target is None:
            return False
        ok = self._apply(target, self.applied_revision)
        if ok:
            self._done_key = (self._applied_core or b"", self.state, self.state_revision,
                              self.closed)
        return ok

    def before(self, core: bytes) -> None:
        """Withdraw, before the maps change, what the new core no longer announces: VPCs that
        go and VPCs whose storage-facing prefixes change (their maps change next)."""
        old = self._cluster(self._applied_core) if self.applied is not None else None
        new = self._cluster(core)
        if old is None or new is None or self.applied is None:
            return
        before = {v.name: facing_prefixes(v) for v in old.vpcs}
        keep = {v.name for v in new.vpcs if before.get(v.name) == facing_prefixes(v)}
        try:
            target = self._render(new, programmed=keep)
        except (KeyError, RenderError):
            return  # the reconciler rejects this intent; the maps and routing stay
        if target is None or set(target.announced) >= set(self.applied.announced):
            return  # routing left to the operator, or nothing to withdraw
        self._apply(target, None)

    def after(self, rec: _Applied) -> None:
        """Bring FRR to what the maps hold (no-op when nothing changed since the last apply)."""
        core = rec.objects.get(CORE)
        if core is None:
            return  # nothing applied yet
        key = (core, self.state, self.state_revision, self.closed)
        if self.mode == "error":
            if self.now() < self._retry_at:
                return
        elif key == self._done_key and not self._check_due():
            return
        cluster = self._cluster(core)
        if cluster is None:
            return
        try:
            target = self._render(cluster)
        except KeyError:
            return  # this gateway is not in the intent: the reconciler rejected it
        except RenderError as exc:
            self._failed(f"cannot render: {exc}")
            return
        if target is None:
            self.mode, self.applied = "unmanaged", None
            self.message = ("the intent has no bgp: section for this gateway: routing is left "
                            "to the operator (FRR keeps whatever it runs)")
            self._done_key = key
            return
        check = key == self._done_key and self.mode == "managed"
        if self._apply(target, rec.revision, check):
            self._done_key, self._applied_core = key, core
            self.applied_state_revision = key[2]

    def _check_due(self) -> bool:
        """Whether to apply the same text again: FRR may have been changed behind the agent's
        back (a vtysh session, a restart from another file). When nothing differs this costs
        frr-reload.py's comparison alone."""
        return (self.mode == "managed" and self.check_every > 0
                and self.now() - self._checked_at >= self.check_every)

    def _apply(self, target: Rendered, revision: int | None, check: bool = False) -> bool:
        """Apply one rendered configuration; False (and reported) when FRR did not take it.
        check: the same text again (a drift check): only a difference counts as a change."""
        try:
            changes = self.applier.apply(target.config)
        except (ApplyError, OSError, subprocess.SubprocessError) as exc:
            self._failed(str(exc))
            return False
        self._checked_at = self.now()
        if check and not changes.empty:
            self.drift_corrections += 1
            log.warning("gateway %s: FRR's configuration had drifted from the intent: "
                        "%d lines deleted, %d added to correct it", self.gateway,
                        len(changes.deleted), len(changes.added))
        if check and changes.empty:
            return True
        self.applies += 1
        self.applied, self.last_changes = target, changes
        if revision is None:
            self._done_key = None  # a partial step: the next `after` applies in full
        else:
            self.applied_revision = revision
            self.mode, self.message = "managed", ""
        if not changes.empty:
            log.info("gateway %s: routing %s: %d lines deleted, %d added in %.0f ms",
                     self.gateway, "applied" if revision is not None else "withdrawn first",
                     len(changes.deleted), len(changes.added), changes.seconds * 1000)
        return True

    def _failed(self, message: str) -> None:
        self.errors += 1
        self.mode, self.message = "error", message[:1000]
        self._retry_at = self.now() + self.retry_every
        log.warning("gateway %s: routing: %s", self.gateway, self.message)

    # ---- report ----------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What the agent reports about routing (status `routing`)."""
        a = self.applied
        out: dict[str, Any] = {
            "mode": self.mode, "message": self.message, "revision": self.applied_revision,
            "announced": list(a.announced) if a else [],
            "bandwidth_mbps": a.state.bandwidth_mbps if a else None,
            "graceful_shutdown": a.state.graceful_shutdown if a else False,
            "withdraw": a.state.withdraw if a else False,
            # every neighbour shut: the fast path failed closed (agent status `fastpath`)
            "shutdown": a.state.shutdown if a else False,
            "canary": a.state.canary if a else None,
            # the routing object (routing/<gateway>) FRR holds, the one read, a refusal
            "state_revision": self.applied_state_revision,
            "state_wanted": self.state_revision, "state_error": self.state_error,
            "applies": self.applies, "errors": self.errors,
            "drift_corrections": self.drift_corrections,
            # applies of a migration step's lines through vtysh alone, and those whose check
            # failed and went through frr-reload.py (frr_apply's module doc)
            "direct_applies": getattr(self.applier, "direct_applies", 0),
            "direct_fallbacks": getattr(self.applier, "direct_fallbacks", 0),
            "last_change": {"deleted": len(self.last_changes.deleted),
                            "added": len(self.last_changes.added),
                            "ms": round(self.last_changes.seconds * 1000, 1)},
        }
        if self.sessions is not None:
            snap = self.sessions()
            out["sessions"] = {"bgp": snap.get("bgp"), "bfd": snap.get("bfd")}
        return out

    def status_key(self) -> tuple[Any, ...]:
        """What changes the status enough to report it at once."""
        a = self.applied
        return (self.mode, self.message, self.applied_revision, a.announced if a else (),
                a.state if a else None, self.applied_state_revision, self.state_error)

    def collect(self) -> Iterator[Any]:
        """Prometheus families of what was applied (sessions: routing.RoutingCollector)."""
        modes = GaugeMetricFamily("crosszone_routing_mode", "1 for the agent's routing mode "
                                  "(managed, unmanaged, error, starting)", labels=["mode"])
        for m in ("managed", "unmanaged", "error", "starting"):
            modes.add_metric([m], 1.0 if self.mode == m else 0.0)
        yield modes
        if self.applied_revision is not None:
            g = GaugeMetricFamily("crosszone_routing_applied_revision",
                                  "Intent revision whose routing FRR holds")
            g.add_metric([], self.applied_revision)
            yield g
        if self.applied_state_revision is not None:
            sr = GaugeMetricFamily("crosszone_routing_state_revision", "Revision of the "
                                   "gateway's routing object (routing/<gateway>) FRR holds")
            sr.add_metric([], self.applied_state_revision)
            yield sr
        a = self.applied
        ann = GaugeMetricFamily("crosszone_routing_announced", "1 for each prefix the gateway "
                                "announces", labels=["prefix"])
        for p in a.announced if a else ():
            ann.add_metric([p], 1.0)
        yield ann
        bw = GaugeMetricFamily("crosszone_routing_bandwidth_mbps", "Link bandwidth the "
                               "gateway's routes carry (0: none, plain ECMP)")
        bw.add_metric([], float(a.state.bandwidth_mbps or 0) if a else 0.0)
        yield bw
        gs = GaugeMetricFamily("crosszone_routing_graceful_shutdown", "1 while the gateway "
                               "announces with the graceful-shutdown community")
        gs.add_metric([], 1.0 if a and a.state.graceful_shutdown else 0.0)
        yield gs
        n = CounterMetricFamily("crosszone_routing_applies", "FRR configurations applied")
        n.add_metric([], self.applies)
        yield n
        e = CounterMetricFamily("crosszone_routing_apply_errors", "FRR configurations that "
                                "could not be rendered or applied")
        e.add_metric([], self.errors)
        yield e
        d = CounterMetricFamily("crosszone_routing_drift_corrections", "Times FRR's "
                                "configuration differed from the intent's and was corrected")
        d.add_metric([], self.drift_corrections)
        yield d


def routing_owner(gateway: str, target: FrrTarget,
                  sessions: Callable[[], dict[str, Any]] | None = None) -> RoutingOwner:
    """The owner of a host's FRR (`target`) for `crosszone agent`: frr-reload.py applies, the
    hostname is the machine's (vtysh shows it beside the daemons' and cannot remove it, so
    any other would differ at every comparison)."""
    sock = target.sockets / "bgpd.vty"
    return RoutingOwner(gateway, FrrReloadApplier(target), hostname=socket.gethostname(),
                        sessions=sessions, fast=lambda cmds: run_commands(sock, cmds))
