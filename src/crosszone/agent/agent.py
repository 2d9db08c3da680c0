"""The per-gateway agent: attach the fast path if needed, watch the store, apply diffs, report.

Restart safety: the maps are pinned under the pin directory, so the fast path forwards while no
agent runs. A (re)started agent opens the pins, reads what the maps hold, and applies only the
difference to the desired state: an unchanged intent writes nothing. Stable ids and the last
applied revision are kept in a state file (`default_state_file`: /run/crosszone/agent/).

Store unreachable: the maps keep the last applied state; the agent retries with exponential
backoff (time is injected: `now`, `sleep`), reports `store_up 0` and `health: degraded`.

A bad revision never stops the agent: whatever goes wrong while decoding, validating, compiling
or writing one (the reconciler rejects it; anything it did not foresee is caught here too), the
revision is rejected, the maps keep the last good state, the rejection is counted
(`crosszone_rejected_revisions`, by stage) and logged, and the loop goes on with the next one.
A watch from a revision the store has compacted away reads the whole state again (a resync that
diffs against the maps, so it writes only what changed).

Status goes to the store when it changes (revision, health, message, rejections) and otherwise
as a heartbeat every `status_every` seconds (30): an idle agent adds two log rows a minute, not
one a second. With `status_busy_every` > 0, a changed status waits until a watch finds nothing
new (or that many seconds pass), so that while changes stream in no status commit sits in front
of the next change; the default (0) reports every applied revision at once.

Fail closed (issue 25): with a `FastPathGuard` (fastpath_guard.py, started by `watch_fastpath`)
a thread compares every 20 ms the program on each gateway port with the pinned one. On a
mismatch `fastpath_changed` takes the gateway out of routing (routing_owner.fail_closed: every
BGP neighbour shut), sets health `failed-closed` (whatever the reconcile loop reports: the
health property says so until the program is back), with a message naming the port, what it
has and the expected id, and writes the status at once, with `fastpath`: {"ok", "expected",
"attached": {port: id}, "since"}. The migration's runner reads `health == "failed-closed"` as
"this gateway is out". Once the expected program is on every port again, the gateway is
announced again (its maps were kept programmed) and health goes back to what the loop says.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crosszone.abi.reasons import Reason
from crosszone.agent.fastpath_guard import FastPathGuard, PortForwarding, Report
from crosszone.agent.metrics import AgentMetrics, FastPathCollector
from crosszone.agent.reconcile import Applied, Reconciler
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.compile.diff import Sink
from crosszone.compile.gateway import Ids
from crosszone.store.objects import CORE
from crosszone.store.routing import GatewayRouting, RoutingObjectError
from crosszone.store.routing import key as routing_key
from crosszone.store.store import INTENT, STATUS, Event, RevisionCompacted, Store, StoreUnavailable

log = logging.getLogger("crosszone.agent")


@dataclass
class Backoff:
    """Exponential backoff: initial, doubling, capped; reset after a success."""

    initial: float = 0.05
    cap: float = 5.0
    current: float = field(default=0.0, init=False)

    def next(self) -> float:
        """The next delay."""
        self.current = self.initial if self.current == 0 else min(self.cap, self.current * 2)
        return self.current

    def reset(self) -> None:
        """Back to the initial delay."""
        self.current = 0.0


class Agent:
    """One gateway's reconcile loop over a store and a sink."""

    def __init__(self, gateway: str, store: Store, sink: Sink,
                 ifindex_of: Callable[[str], int], state_file: Path | None = None,
                 read_actual: Callable[[Any], Any] | None = None,
                 metrics: AgentMetrics | None = None,
                 now: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 status_every: float = 30.0, status_busy_every: float = 0.0,
                 routing: RoutingOwner | None = None) -> None:
        self.gateway = gateway
        # FRR around the maps (routing_owner: announce after programming, withdraw before
        # removal); None: this agent does not touch routing
        self.routing = routing
        self.store = store
        self.state_file = state_file
        self.read_actual = read_actual
        self.metrics = metrics or AgentMetrics()
        self.now, self.sleep = now, sleep
        self.backoff = Backoff()
        self.status_every = status_every
        self.status_busy_every = status_busy_every
        self._last_status = -1e18
        self._last_reported: tuple | None = None
        self._health, self._message = "starting", ""
        # the fast path's watchdog (None: not watched) and its last change of outcome
        self.guard: FastPathGuard | None = None
        # the ports' kernel forwarding, turned off while failed closed (None: left alone)
        self.port_forwarding: PortForwarding | None = None
        self.fastpath: Report | None = None
        self._closed_message = ""
        self._report_lock = threading.Lock()  # the guard's thread reports too
        # where this agent's metrics are served (reported: the migration's runner reads them)
        self.metrics_address: str | None = None
        # whether this agent writes status/<gateway>: a one-shot run (`crosszone agent --once`,
        # an upgrade's reattach) beside the gateway's running agent must not replace that
        # agent's report (routing mode, fast-path verdict) with its own
        self.publish = True
        self._routing_raw: bytes | None = None  # the routing object last handed to routing
        self.counters: Callable[[], dict[str, int]] = lambda: {}
        self.occupancy: Callable[[], dict[str, int]] = lambda: {}
        ids = None
        if state_file is not None and state_file.exists():
            try:
                ids = Ids.from_json(json.dumps(json.loads(state_file.read_text())["ids"]))
            except (ValueError, KeyError):
                ids = None  # a damaged state file: ids are re-derived, entries rewritten
        self.rec = Reconciler(gateway, sink, ifindex_of, ids=ids, now=now)
        self.started = False
        # After a full load, work left for the first idle moment (see _warm_up).
        self.warming = False

    @property
    def failed_closed(self) -> bool:
        """The fast path is not the loaded program on every port: the gateway is out."""
        return self.fastpath is not None and not self.fastpath.ok

    @property
    def health(self) -> str:
        """`failed-closed` while the fast path is gone, else the reconcile loop's."""
        return "failed-closed" if self.failed_closed else self._health

    @health.setter
    def health(self, value: str) -> None:
        self._health = value

    @property
    def message(self) -> str:
        """Why the health is what it is."""
        return self._closed_message if self.failed_closed else self._message

    @message.setter
    def message(self, value: str) -> None:
        self._message = value

    def watch_fastpath(self, guard: FastPathGuard) -> None:
        """Start checking the fast path (guard.on_change must be `fastpath_changed`)."""
        self.guard = guard
        guard.start()

    def fastpath_changed(self, report: Report) -> None:
        """The guard's outcome changed (any thread): fail closed, or come back."""
        was = self.failed_closed
        for iface, pid in report.attached.items():
            self.metrics.fastpath_attached.labels(iface).set(
                1 if pid == report.expected else 0)
        if not report.ok and not was:
            self.metrics.fail_closed.inc()
            # first the kernel path (the routers' data-plane checks fail at once), then BGP
            forwarding = (self.port_forwarding.off(list(report.attached))
                          if self.port_forwarding is not None else "")
            action = (self.routing.fail_closed() if self.routing is not None else
                      "routing is off in this agent (--no-routing): cannot withdraw, the "
                      "operator must take this gateway out")
            self._closed_message = "; ".join(x for x in (report.problem(), forwarding, action)
                                             if x)
            self.fastpath = report
            log.error("gateway %s: failed closed: %s", self.gateway, self._closed_message)
            self.report(force=True)  # the runner reads this at once
            if self.routing is not None:  # persist the shutdown, then say FRR holds it
                more = self.routing.settle()
                if more:
                    self._closed_message += f"; {more}"
                self.report(force=True)
            return
        if report.ok and was:
            self.fastpath = report
            unrestored = (self.port_forwarding.restore() if self.port_forwarding is not None
                          else "")
            if unrestored:
                log.error("gateway %s: %s", self.gateway, unrestored)
            said = self.routing.reopen() if self.routing is not None else ""
            self.metrics.fail_closed_recoveries.inc()
            log.warning("gateway %s: the fast path is back (program id %d on %s)%s",
                        self.gateway, report.expected, ", ".join(sorted(report.attached)),
                        f": {said}" if said else "")
            self.report(force=True)
            return
        if not report.ok:  # still failed, something else attached: say what
            self._closed_message = self._closed_message.replace(
                self.fastpath.problem() if self.fastpath else "", report.problem(), 1)
        self.fastpath = report
        self.report(force=True)

    def _warm_up(self) -> None:
        """What a full load leaves for later, done while nothing waits: the route tables'
        lookup dicts (built lazily, 1.8 s at 1M routes, which the first one-route change paid
        in `bench control`), then gc.freeze(): the millions of long-lived entries leave the
        collector's generations, so no gen-2 collection walks them in the middle of a change.
        Frozen objects are still freed by reference counting when a later load replaces them."""
        self.rec.warm()
        gc.freeze()
        self.warming = False

    def _record(self, res: Applied) -> None:
        m = self.metrics
        m.reconcile_seconds.labels(res.mode).observe(res.seconds)
        m.entries_written.labels("put").inc(res.puts)
        m.entries_written.labels("delete").inc(res.deletes)
        if res.mode == "rejected":
            m.rejected.inc()
            m.rejected_by_stage.labels(res.stage or "validate").inc()
            self.health, self.message = "rejecting", self.rec.last_error or ""
            log.warning("gateway %s: %s", self.gateway, self.message)
        else:
            m.applied_revision.set(self.rec.revision)
            self.health, self.message = "ok", ""
            if res.mode == "full":
                self.warming = True
            if self.state_file is not None and self.rec.ids is not None:
                self.state_file.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.state_file.with_suffix(".tmp")
                # pid and last apply: who wrote this, and what it cost (restart diagnostics)
                try:
                    tmp.write_text(json.dumps({
                        "revision": self.rec.revision,
                        "ids": json.loads(self.rec.ids.to_json()), "pid": os.getpid(),
                        "last": {"revision": res.revision, "mode": res.mode,
                                 "puts": res.puts, "deletes": res.deletes}}))
                    tmp.replace(self.state_file)
                except OSError as exc:  # a full /run must not stop forwarding updates
                    log.warning("gateway %s: state file %s: %s", self.gateway,
                                self.state_file, exc)

    def _guarded(self, revision: int, fn: Callable[[], Applied | None],
                 core: bytes | None = None) -> Applied | None:
        """Run one reconcile; an exception the reconciler did not turn into a rejection
        (a bug) rejects the revision all the same instead of ending the agent. core: the
        intent's core object the reconcile brings, if it changes (routing withdraws first)."""
        t0 = self.now()
        try:
            if self.routing is not None:
                return self.routing.around(self.rec, fn, core)
            return fn()
        except Exception as exc:
            log.exception("gateway %s: revision %d", self.gateway, revision)
            self.rec.seen = max(self.rec.seen, revision)
            return self.rec._reject(revision, exc, t0, "internal")

    def _store_failed(self, exc: Exception) -> None:
        self.metrics.store_up.set(0)
        self.metrics.store_errors.inc()
        self.health = "degraded"
        self.message = f"store unreachable, keeping revision {self.rec.revision}: {exc}"
        self.sleep(self.backoff.next())

    def _read_routing(self) -> None:
        """Hand this gateway's routing object (`routing/<gateway>`, the migration's step) to
        the routing owner when it changed; the next reconcile applies it. One read per step:
        the object is outside `intent/` (a weight is not an intent revision: it must not make
        the maps recompile), so the intent's watch does not bring it, and a step waits at
        most its watch timeout (0.5 s in `crosszone agent`) before it sees a new one."""
        if self.routing is None:
            return
        try:
            raw = self.store.get(routing_key(self.gateway))
        except StoreUnavailable:
            return  # the watch reports the store; the last object stays applied
        if raw == self._routing_raw:
            return
        self._routing_raw = raw
        if raw is None:
            self.routing.set_routing_object(None)
            return
        try:
            self.routing.set_routing_object(GatewayRouting.from_bytes(raw))
        except RoutingObjectError as exc:
            self.routing.refuse_routing_object(f"routing/{self.gateway}: {exc}")

    def start(self) -> Applied | None:
        """Read the whole desired state once and reconcile the maps to it."""
        try:
            objs, rev = self.store.get_prefix(INTENT)
        except StoreUnavailable as exc:
            self._store_failed(exc)
            return None
        self._read_routing()
        self.metrics.store_up.set(1)
        self.backoff.reset()
        objects = {k[len(INTENT):]: v for k, v in objs.items()}
        if not objects:
            self.rec.revision = self.rec.seen = rev
            self.started = True
            self.health, self.message = "waiting", "no intent in the store yet"
            return None
        res = self._guarded(rev, lambda: self.rec.load(objects, rev, actual=self.read_actual),
                            objects.get(CORE))
        self.started = True
        if res is not None:
            self._record(res)
        return res

    def step(self, timeout: float = 1.0) -> Applied | None:
        """Wait up to timeout for new revisions and apply them; report status when due."""
        if not self.started or self.rec.suspect:
            res = self.start()
            self.report()
            return res
        try:
            events = self.store.watch(INTENT, self.rec.seen, timeout)
        except RevisionCompacted as exc:
            # the log no longer reaches back to our revision: read everything again
            log.warning("gateway %s: %s", self.gateway, exc)
            self.metrics.resyncs.inc()
            self.started = False
            return None
        except Exception as exc:  # StoreUnavailable, or a broken reply: the same to us
            self._store_failed(exc)
            return None
        self.metrics.store_up.set(1)
        self.backoff.reset()
        self._read_routing()
        revision = max((e.revision for e in events), default=self.rec.seen)
        core = [e.value for e in sorted(events, key=lambda e: e.revision)
                if e.key == INTENT + CORE]
        res = self._guarded(revision, lambda: self.rec.on_events(
            [Event(e.revision, e.key[len(INTENT):], e.value) for e in events]),
            core[-1] if core else None)
        if res is not None:
            self._record(res)
        self.report(idle=not events)
        if not events and self.warming:
            self._warm_up()
        return res

    def status(self) -> dict[str, Any]:
        """This agent's report."""
        out: dict[str, Any] = {"revision": self.rec.revision, "health": self.health,
                               "message": self.message, "rejected": self.rec.rejected,
                               "updated": time.time()}
        try:
            out["counters"] = self.counters()
            out["occupancy"] = self.occupancy()
        except OSError as exc:
            out["counters"], out["message"] = {}, f"counters unreadable: {exc}"
        if self.metrics_address:
            out["metrics"] = self.metrics_address
        out["routing"] = (self.routing.status() if self.routing is not None else
                          {"mode": "off", "message": "this agent does not manage routing"})
        if self.fastpath is not None:
            out["fastpath"] = self.fastpath.to_json()
        return out

    def report(self, force: bool = False, idle: bool = True) -> None:
        """Write the status to the store when it changed (once idle), else as a heartbeat."""
        with self._report_lock:
            state = (self.rec.revision, self.health, self.message, self.rec.rejected,
                     self.routing.status_key() if self.routing is not None else None,
                     self.fastpath)
            since = self.now() - self._last_status
            due = since >= self.status_every or (state != self._last_reported and (
                idle or since >= self.status_busy_every))
            if not self.publish or (not force and not due):
                return
            try:
                self.store.put(STATUS + self.gateway, json.dumps(self.status()).encode())
                self._last_status, self._last_reported = self.now(), state
            except StoreUnavailable:
                pass  # reported by the next watch failure

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Loop until should_stop()."""
        while not should_stop():
            self.step()


def fastpath_hooks(agent: Agent, maps: Any) -> None:
    """Wire the agent's counters, occupancy and metrics to a gateway's pinned maps."""
    def vpc_counters() -> dict[str, tuple[int, int, int, int]]:
        out = {}
        for name, vid in (agent.rec.ids.vpcs.items() if agent.rec.ids else []):
            c = maps.vpc_stats(vid)
            out[name] = (c.to_storage_packets, c.to_storage_bytes, c.to_compute_packets,
                         c.to_compute_bytes)
        return out

    def occupancy() -> dict[str, int]:
        return {k: len(v) for k, v in agent.rec.entries.items()}

    def counters() -> dict[str, int]:
        stats = maps.reason_stats()
        out = {"forwarded": 0, "passed": 0, "dropped": 0}
        key = {"forward": "forwarded", "pass": "passed", "drop": "dropped"}
        for r, (p, _b) in stats.items():
            out[key[Reason(r).verdict_class]] += p
        return out

    def policy_counters() -> dict[str, Any]:
        return {name: maps.policy_stats(vid)
                for name, vid in (agent.rec.ids.vpcs.items() if agent.rec.ids else [])}

    agent.counters, agent.occupancy = counters, occupancy
    agent.metrics.add_fastpath(FastPathCollector(vpc_counters, maps.reason_stats, occupancy,
                                                 policy_counters))


def gateway_ports(agent: Agent) -> Callable[[], list[str]]:
    """The gateway's interfaces in the intent its maps hold (what ensure_attached attached
    the program to); [] before the first reconcile. Read from the guard's thread."""
    from crosszone.intent.errors import InvalidIntentError
    from crosszone.store.objects import join_objects

    cache: dict[bytes, list[str]] = {}

    def ports() -> list[str]:
        core = agent.rec.objects.get(CORE)
        if core is None:
            return []
        if core not in cache:
            cache.clear()
            try:
                gw = join_objects({CORE: core}).gateway(agent.gateway)
                cache[core] = [i.name for i in gw.interfaces]
            except (InvalidIntentError, KeyError):
                cache[core] = []
        return cache[core]
    return ports


def fastpath_guard(agent: Agent, pin_dir: Path, netns: str | None) -> FastPathGuard:
    """The watchdog of a gateway's ports against the program pinned under pin_dir."""
    from crosszone.fastpath.deploy import pinned_program_id

    return FastPathGuard(gateway_ports(agent), lambda: pinned_program_id(pin_dir),
                         agent.fastpath_changed, netns=netns)


def ensure_attached(store: Store, gateway: str, pin_dir: Path, netns: str | None,
                    sleep: Callable[[float], None] = time.sleep, reattach: bool = False,
                    on_wait: Callable[[str, str], None] | None = None) -> bool:
    """Load and attach the fast path unless it is pinned already (waits for a valid intent).

    Never writes a table: the program is loaded over the pinned maps (reused when present,
    created empty otherwise) and attached to the gateway's interfaces; the agent's first
    reconcile then writes exactly the difference between those maps and the desired state.
    With reattach, the program is loaded and attached again even when pinned (an upgrade:
    the new program takes over the live maps). Returns whether a program was attached.

    Until the store holds an intent whose core is valid and names this gateway (first start,
    or after a reboot, with `intent/core` missing, `[]`, 100k-deep JSON...), it waits with
    backoff (0.05 s doubling to 5 s) and reports why in `status/<gateway>`, health `waiting`
    (no intent), `rejecting` (an invalid one) or `degraded` (store unreachable), and to
    on_wait(health, message) when that changes."""
    from crosszone.compile.tables import Tables, compile_tables
    from crosszone.fastpath import deploy
    from crosszone.intent.errors import InvalidIntentError
    from crosszone.store.objects import join_objects

    if not reattach and (pin_dir / "maps").is_dir() and (pin_dir / "prog").exists():
        return False
    backoff = Backoff()
    said = reported = None  # the last (health, message) told to on_wait and to the store
    while True:
        tables: Tables | None = None
        try:
            objs, _ = store.get_prefix(INTENT)
            # Only the interfaces matter here (write_tables=False), so the core intent (no
            # pool prefixes) is enough; the chunks are parsed by the reconcile.
            core = {k[len(INTENT):]: v for k, v in objs.items() if k == INTENT + CORE}
            if not objs:
                why = ("waiting", "not attached: no intent in the store yet")
            else:
                tables = compile_tables(join_objects(core), gateway, core=True)
        except StoreUnavailable as exc:
            why = ("degraded", f"not attached: store unreachable: {exc}")
        # (no revision in the message: the status write itself moves the store's revision,
        # and a message that changed with it would be written again at every try)
        except InvalidIntentError as exc:
            why = ("rejecting", f"not attached: the stored intent is invalid: {exc}; waiting "
                   "for a valid one")
        except KeyError:
            why = ("rejecting", f"not attached: the stored intent has no gateway {gateway!r}; "
                   "waiting for one that has")
        if tables is not None:
            break
        if why != said and on_wait is not None:
            on_wait(*why)
        said = why
        if why != reported:
            try:
                store.put(STATUS + gateway, json.dumps({
                    "revision": None, "health": why[0], "message": why[1], "rejected": 0,
                    "updated": time.time()}).encode())
                reported = why
            except StoreUnavailable:
                pass  # said again at the next try
        sleep(backoff.next())
    deploy.attach_tables(tables, pin_dir, netns, write_tables=False)
    return True


STATE_DIR = Path("/run/crosszone/agent")


def default_state_file(pin_dir: Path) -> Path:
    """Where an agent keeps its state for a pin directory: on tmpfs, like the pins (both go at
    reboot, together), and not in bpffs, which holds only BPF objects."""
    return STATE_DIR / (str(pin_dir).strip("/").replace("/", "_") + ".json")


def ifindex_in(netns: str | None) -> Callable[[str], int]:
    """if_nametoindex inside a namespace."""
    from crosszone.linux.netns import in_netns

    def look(name: str) -> int:
        with in_netns(netns):
            return socket.if_nametoindex(name)
    return look
