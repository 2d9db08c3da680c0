"""The product's migration driver: the crosszone gateways through their agents, the legacy
gateways through an adapter, convergence and guards from what an operator has.

`AgentDriver` implements the engine's `Driver` (migrate/engine.py) for a real deployment and
for the emulator alike:

- **moves** (canary, each step's weight, retire): `moves.plan_move` says what each gateway
  does; the driver performs the legacy side's actions through the adapter (`LegacySide`) and
  writes every crosszone gateway's routing object (`routing/<gateway>`, store/routing.py) in
  one store transaction, then waits until every agent reports in its status that FRR holds
  that object's revision (`routing.state_revision`). An agent that is down holds the step: the
  driver waits (and keeps the runner's heartbeat) until it is back and has applied it.
- **convergence**: once every agent applied, the driver samples the forwarded counters of
  both sides (the agents' metrics, `crosszone_verdict_bytes_total` and `crosszone_verdicts_total`
  with `verdict="forward"`; the adapter's counters for the legacy gateways: bytes when every
  one can say them, else packets, `share_unit`) and waits until the new side's share of the
  traffic forwarded over the last `window_s` reaches the step's weight within
  `share_tolerance` percentage points. `converge_ms` runs from the first action to that
  moment; a share that does not get there within `share_timeout_s` is recorded (`share`,
  `share_reached: false`) and the migration goes on: with few flows ECMP hashing cannot split
  packets at every weight (a flow goes one way), and the guards, not the share, protect the
  traffic.
- **guards**: the probes' verdicts in the store (`Probes`: failed reads, p99 against the
  baseline), the target crosszone gateways' fast-path drops since the previous reading (their
  metrics, `verdict="drop"`), BGP and BFD sessions as the crosszone gateways see them (their
  metrics, `crosszone_bgp_session_up` / `crosszone_bfd_session_up`), and unhealthy agents
  (status not `ok`, a stale status, a metrics endpoint that refuses, or that times out at two
  readings in a row).
- **lost gateways** (`lost_gateways.py`): a crosszone gateway whose agent reports
  failed-closed, that gives no sign of life for the plan's `agent_lost_s`, or that does not
  apply a move within `apply_timeout_s`, is drained at once (its routing object `withdraw`,
  not waited for) and left out of every later move; `lost` names them with the reason, the
  engine records them and rolls back. `attribute` says which gateway a guard breach points
  at, from the last guard reading.
- **parity**: every crosszone gateway's agent reports health `ok`, manages its routing
  (`routing.mode: managed`, so it can apply the steps) and sees its sessions up; the legacy
  side answers its counter.

Time is injected (`clock`, `sleep`), and so are the metrics scraper and the probes, so the unit
tests run a migration against fake agents in milliseconds.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from prometheus_client.parser import text_string_to_metric_families

from crosszone.agent.frr_config import facing_prefixes, with_halves
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.schema import Cluster
from crosszone.migrate import engine as eng
from crosszone.migrate import lost_gateways
from crosszone.migrate.lost_gateways import Liveness
from crosszone.migrate.moves import (
    LegacyAction,
    Move,
    Sides,
    plan_canary,
    plan_move,
    plan_retire,
)
from crosszone.migrate.plan import DEFAULT_AGENT_LOST_S, Plan
from crosszone.store import routing
from crosszone.store.objects import CORE, join_objects
from crosszone.store.routing import GatewayRouting
from crosszone.store.store import INTENT, STATUS, Store

#: Percentage points by which the new side's share of forwarded packets may differ from the
#: step's weight and count as reached.
SHARE_TOLERANCE = 5.0
#: The share is taken over the packets forwarded in this many seconds (a sliding window).
SHARE_WINDOW_S = 1.0
#: Fewer packets than this in the window: no share can be read (too little traffic).
SHARE_MIN_PACKETS = 50
#: How long to wait for the share once every agent applied the step.
SHARE_TIMEOUT_S = 30.0
#: Latency factors are taken against at least this p99 (ms): below it, noise.
LATENCY_FLOOR_MS = 50.0
#: An agent's status older than this is taken for a dead agent (it writes one every 30 s).
STATUS_STALE_S = 75.0
#: How long an agent's metrics endpoint may take to answer.
METRICS_TIMEOUT_S = 3.0
#: The kind name of the gateways driven through agents (the other side is the legacy one).
AGENT_KIND = "crosszone"


#: A parity problem that is a session read down by an agent (parity waits for those a while).
#: parity's problems that a later reading may clear: a session read down, or none read (the
#: agent's reader had no answer from FRR yet: it reads every 3 s, and a vtysh call on a saturated
#: box can fail; a CI run was refused on "xgw1: its agent reports no BGP session" that way)
_SESSION_PROBLEM = re.compile(r": (BGP|BFD) session with \S+ is not (Established|up)$"
                              r"|: its agent reports no BGP session$")


class DriverError(RuntimeError):
    """The driver could not perform a move (the message says which gateway and why)."""


class LegacySide(Protocol):
    """The legacy gateways' actions a migration needs (migrate/legacy_adapter.py implements
    them; tests use a fake). Each acts on one gateway, names it, and is idempotent."""

    def set_weight(self, gateway: str, bandwidth_mbps: int) -> None:
        """Weigh what the gateway announces with this BGP link bandwidth (and without
        graceful shutdown); a withdrawn gateway is announced again by `restore`."""
        ...

    def drain(self, gateway: str) -> None:
        """Announce with the graceful-shutdown community: routers keep it as backup only."""
        ...

    def withdraw(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Stop announcing `prefixes` (the canary's), or everything when none are given
        (sessions stay up)."""
        ...

    def restore(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        """Announce `prefixes` again, or, when none are given, as before the migration:
        everything, no weight, no graceful shutdown."""
        ...

    def forwarded_packets(self, gateway: str) -> int:
        """Packets the gateway has forwarded for the VPCs so far (a counter)."""
        ...

    def forwarded_bytes(self, gateway: str) -> int | None:
        """Bytes the gateway has forwarded for the VPCs so far, None when it cannot say (the
        traffic share is then read in packets)."""
        ...


@dataclass(frozen=True)
class ProbeRound:
    """The probes' reads of one role since the previous reading."""

    reads: int
    errors: int
    p99_ms: float


class Probes(Protocol):
    """The probes' verdicts in the store (the `crosszone probe` role writes them)."""

    def read(self, role: str) -> ProbeRound | None:
        """Reads of `role` ("canary" or "production") since the previous call; None when no
        probe of that role reports."""
        ...


@dataclass(frozen=True)
class AgentSample:
    """What one scrape of an agent's metrics says."""

    forwarded: int = 0
    forwarded_bytes: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    bgp: dict[str, bool] = field(default_factory=dict)
    bfd: dict[str, bool] = field(default_factory=dict)


def parse_metrics(text: str) -> AgentSample:
    """An agent's metrics page (Prometheus text format) -> the figures the driver reads."""
    fwd = fwd_b = 0
    drops: dict[str, int] = {}
    bgp: dict[str, bool] = {}
    bfd: dict[str, bool] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "crosszone_verdicts_total":
                if s.labels.get("verdict") == "forward":
                    fwd += int(s.value)
                elif s.labels.get("verdict") == "drop":
                    r = s.labels.get("reason", "?")
                    drops[r] = drops.get(r, 0) + int(s.value)
            elif s.name == "crosszone_verdict_bytes_total" and \
                    s.labels.get("verdict") == "forward":
                fwd_b += int(s.value)
            elif s.name == "crosszone_bgp_session_up":
                peer = s.labels.get("peer", "?")
                bgp[peer] = bgp.get(peer, True) and s.value == 1
            elif s.name == "crosszone_bfd_session_up":
                bfd[s.labels.get("peer", "?")] = s.value == 1
    return AgentSample(fwd, fwd_b, drops, bgp, bfd)


class ScrapeError(OSError):
    """An agent's metrics could not be read; `slow` when it only did not answer in time."""

    def __init__(self, message: str, slow: bool = False) -> None:
        super().__init__(message)
        self.slow = slow


def http_scrape(address: str, timeout: float = METRICS_TIMEOUT_S) -> str:
    """GET http://address/metrics (ScrapeError when it fails)."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as resp:
            return resp.read().decode()
    except TimeoutError as exc:
        raise ScrapeError(f"metrics endpoint {address}: {exc}", slow=True) from None
    except urllib.error.URLError as exc:
        raise ScrapeError(f"metrics endpoint {address}: {exc.reason}",
                          slow=isinstance(exc.reason, TimeoutError)) from None
    except (OSError, ValueError) as exc:
        raise ScrapeError(f"metrics endpoint {address}: {exc}") from None


def _intent(store: Store) -> Cluster | None:
    """The stored intent's core (VPCs, gateways), or None when there is none or it is not
    valid."""
    raw = store.get(INTENT + CORE)
    if raw is None:
        return None
    try:
        return join_objects({CORE: raw})
    except InvalidIntentError:
        return None


def agent_gateways(store: Store) -> list[str]:
    """The crosszone gateways of the stored intent (the agents a migration drives)."""
    raw = store.get(INTENT + CORE)
    if raw is None:
        return []
    try:
        doc = json.loads(raw)
        return [str(g["name"]) for g in doc.get("gateways", [])]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []


def standby(store: Store, gateways: list[str]) -> int:
    """Put crosszone gateways on standby before a migration: sessions up, nothing announced
    (a routing object with `withdraw`), so that they take no traffic before the migration
    gives them some. Returns the objects' revision."""
    rev = routing.next_revision(store)
    store.put_many({routing.key(gw): GatewayRouting(revision=rev, withdraw=True,
                                                    by="standby").to_bytes()
                    for gw in gateways})
    return rev


@dataclass
class AgentDriver:
    """Drives a migration through the agents (crosszone) and an adapter (legacy)."""

    store: Store
    legacy: LegacySide
    legacy_gateways: list[str]
    agents: list[str]
    probes: Probes
    #: gateway -> metrics address (host:port); default: the address the agent reports
    metrics: dict[str, str] = field(default_factory=dict)
    #: where the migration's own state is kept, when not with the agents (`store`: routing
    #: objects and statuses); a resumed runner reads the weight the network is at from it
    state_store: Store | None = None
    #: the intent's name of the plan's canary VPC (the emulator names its VPCs `vpc-<name>`)
    intent_vpc: Callable[[str], str] = lambda name: name
    scrape: Callable[[str], str] = http_scrape
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    #: between the agents' report that FRR holds a move's announcement and the source side's
    #: withdrawal, drain or canary hand-over, for the routers' BGP to take the announcement (a
    #: withdrawal took 126 to 364 ms from a gateway's bgpd to a router's kernel, measured for
    #: docs/routing.md, "Fail closed"; an announcement travels the same way). A source that
    #: stopped as soon as the objects were written black-holed the canary VPC for about a
    #: second at `canary_on` on the emulator, which failed a canary probe round
    announce_settle_s: float = 1.0
    log: Callable[[str], None] = lambda _m: None
    #: called while a move waits (the runner's heartbeat: a long wait is not a dead runner)
    beat: Callable[[], None] = lambda: None
    #: set by the engine during a step's move: reads the guards, True on a breach; the wait
    #: for the traffic share then ends at once (every `guard_every_s`)
    guard_check: Callable[[], bool] | None = None
    guard_every_s: float = 1.0
    #: how long parity reads again sessions that an agent reads down (parity's doc)
    session_settle_s: float = 15.0
    poll_s: float = 0.1
    share_tolerance: float = SHARE_TOLERANCE
    share_window_s: float = SHARE_WINDOW_S
    share_min_packets: int = SHARE_MIN_PACKETS
    share_timeout_s: float = SHARE_TIMEOUT_S
    #: how long a move waits for an agent before that gateway is lost (None: as long as the
    #: agent is alive; a silent one is lost after agent_lost_s anyway)
    apply_timeout_s: float | None = None
    #: seconds without a sign of life after which a gateway is lost (the plan's, once given)
    agent_lost_s: float = DEFAULT_AGENT_LOST_S
    #: gateways lost during this migration, each with why: drained and left out of the moves
    #: (the engine records them in the state and hands them back to a resumed runner)
    lost: dict[str, str] = field(default_factory=dict)
    log_every_s: float = 10.0
    baseline_p99_ms: float | None = None
    #: the last weight move: weight_new, announce_ms, applied_ms, converge_ms, share, ...
    last_move: dict[str, Any] = field(default_factory=dict)
    _weight: int | None = None
    _canary_on: bool = False
    _retired: bool = False
    _drops0: dict[str, dict[str, int]] = field(default_factory=dict)
    _fwd0: dict[str, int] = field(default_factory=dict)
    #: the last guard reading, per gateway: what was wrong with it, and (target gateways that
    #: carry traffic) packets forwarded since the reading before (`attribute`)
    _evidence: dict[str, list[str]] = field(default_factory=dict)
    _forwarded: dict[str, int] = field(default_factory=dict)
    _liveness: Liveness = field(default_factory=Liveness)
    _slow: set[str] = field(default_factory=set)
    _canary_cache: dict[str, list[str]] = field(default_factory=dict)
    _production_cache: dict[str, list[str]] = field(default_factory=dict)
    #: what the traffic share is read in: "bytes" while every legacy gateway's bytes counter
    #: reads, "packets" for good once one does not ("" before the first reading)
    share_unit: str = ""
    _share_said: str = ""

    # ---- who is who ---------------------------------------------------------------------------

    def sides(self, plan: Plan) -> Sides:
        """The plan's sides (DriverError unless exactly one of them is crosszone)."""
        kinds = (plan.source, plan.target)
        if kinds.count(AGENT_KIND) != 1:
            raise DriverError(f"a migration runs between {AGENT_KIND} and another kind of "
                              f"gateway, not {plan.source} -> {plan.target}")
        self.agent_lost_s = plan.agent_lost_s
        return Sides(tuple(self._agents()), tuple(self.legacy_gateways),
                     agents_are_target=plan.target == AGENT_KIND,
                     canary_vpcs=(self.intent_vpc(plan.canary),) if plan.canary else (),
                     canary_prefixes=tuple(self.canary_prefixes(plan)),
                     production_prefixes=tuple(self.production_prefixes(plan)))

    def production_prefixes(self, plan: Plan) -> list[str]:
        """Every prefix the gateways announce but the canary's: the crosszone gateways'
        anycast VTEPs (/32) and every other VPC's storage-facing prefixes (each IPv6 one with
        its halves), from the stored intent; [] without a readable intent. A legacy target
        restores them (moves.plan_move): the gateways it replaces announce the same."""
        key = plan.canary or ""
        if key not in self._production_cache:
            cluster = _intent(self.store)
            if cluster is None:
                return []
            canary = set(self.canary_prefixes(plan))
            vteps = sorted({f"{g.vtep}/32" for g in cluster.gateways if g.name in self.agents})
            facing = [str(n) for v in cluster.vpcs for n in with_halves(facing_prefixes(v))]
            self._production_cache[key] = vteps + [
                x for x in dict.fromkeys(facing) if x not in canary]
        return self._production_cache[key]

    def canary_prefixes(self, plan: Plan) -> list[str]:
        """The canary VPC's storage-facing prefixes as the gateways announce them (each IPv6
        one with its halves), from the stored intent; [] without a canary or a readable
        intent."""
        if not plan.canary:
            return []
        if plan.canary not in self._canary_cache:
            cluster = _intent(self.store)
            name = self.intent_vpc(plan.canary)
            vpc = next((v for v in cluster.vpcs if v.name == name), None) \
                if cluster is not None else None
            self._canary_cache[plan.canary] = [] if vpc is None else [
                str(n) for n in with_halves(facing_prefixes(vpc))]
        return self._canary_cache[plan.canary]

    def _agents(self) -> list[str]:
        """The crosszone gateways a move drives: every one but the lost."""
        return [g for g in self.agents if g not in self.lost]

    def _target_agents(self, plan: Plan) -> list[str]:
        return self._agents() if plan.target == AGENT_KIND else []

    def _live_agents(self, plan: Plan) -> list[str]:
        """The crosszone gateways that carry or may carry traffic (not retired, not lost)."""
        return [] if self._retired and plan.source == AGENT_KIND else self._agents()

    def _weight_now(self) -> int:
        """The weight the network is at: the last move's, else the stored migration's (a
        resumed runner re-asserts the canary before the weight, and must not take the
        current step's traffic off the new gateways in between)."""
        if self._weight is None:
            self._weight = eng.read_state(self.state_store or self.store).weight_new
        return self._weight

    # ---- reading the agents -------------------------------------------------------------------

    def statuses(self) -> dict[str, dict[str, Any]]:
        """Every agent's last status (unreadable ones as {})."""
        items, _ = self.store.get_prefix(STATUS)
        out: dict[str, dict[str, Any]] = {}
        for k, v in items.items():
            try:
                doc = json.loads(v)
            except ValueError:
                doc = {}
            out[k[len(STATUS):]] = doc if isinstance(doc, dict) else {}
        return out

    def _address(self, gw: str, status: dict[str, Any]) -> str | None:
        return self.metrics.get(gw) or (str(status["metrics"]) if status.get("metrics")
                                        else None)

    def sample(self, gw: str, status: dict[str, Any] | None = None) -> AgentSample:
        """One scrape of `gw`'s agent (ScrapeError when it cannot be read)."""
        if status is None:
            status = self.statuses().get(gw, {})
        addr = self._address(gw, status)
        if addr is None:
            raise ScrapeError(f"{gw}: no metrics address (the agent reports none; give one)")
        try:
            out = parse_metrics(self.scrape(addr))
        except ValueError as exc:
            raise ScrapeError(f"{gw}: metrics page unreadable: {exc}") from None
        self._liveness.saw(gw, self.wall())
        return out

    # ---- lost gateways ------------------------------------------------------------------------

    def check_lost(self, plan: Plan | None = None,
                   statuses: dict[str, dict[str, Any]] | None = None) -> dict[str, str]:
        """Gateways found lost by this reading (lost_gateways.py), each drained at once and
        added to `lost`: gateway -> why."""
        if plan is not None:
            self.agent_lost_s = plan.agent_lost_s
        if self._retired and plan is not None and plan.source == AGENT_KIND:
            return {}
        statuses = self.statuses() if statuses is None else statuses
        now = self.wall()
        found: dict[str, str] = {}
        for gw in self._agents():
            st = statuses.get(gw) or {}
            why = lost_gateways.failed_closed(st) or self._silent(gw, st, now)
            if why:
                found[gw] = why
        self.drain(found)
        return found

    def _silent(self, gw: str, st: dict[str, Any], now: float) -> str | None:
        """Why `gw` is lost for silence (no status and no metrics for agent_lost_s), else
        None; its metrics are read before it counts."""
        last = self._liveness.last(gw, st, now)
        if now - last <= self.agent_lost_s or not self._liveness.should_ask(gw, now):
            return None
        try:
            self.sample(gw, st)
            return None
        except ScrapeError as exc:
            return (f"no sign of life for {now - last:.0f} s (agent_lost_s "
                    f"{self.agent_lost_s:g}): no status written and {exc}")[:300]

    def drain(self, gateways: dict[str, str]) -> None:
        """Take gateways out of the migration: each one's routing object `withdraw` (its agent,
        if alive, announces nothing; nothing waits for it to confirm), and `lost` keeps them
        out of every later move."""
        fresh = {g: why for g, why in gateways.items() if g not in self.lost}
        if not fresh:
            return
        self.lost.update(fresh)
        rev = routing.next_revision(self.store)
        self.store.put_many({routing.key(g): GatewayRouting(revision=rev, withdraw=True,
                                                            by="migration: lost").to_bytes()
                             for g in fresh})
        for g, why in fresh.items():
            self.log(f"{g} lost: {why}; drained (routing revision {rev} withdraws it), "
                     "not waited for")

    def attribute(self, plan: Plan, failed: Sequence[str] = ()) -> dict[str, str]:
        """The one gateway the last guard reading points at (lost_gateways.attribute):
        gateway -> why; empty when it points at none or at several."""
        return lost_gateways.attribute(
            {g: e for g, e in self._evidence.items() if g not in self.lost},
            {g: n for g, n in self._forwarded.items() if g not in self.lost},
            self.share_min_packets)

    # ---- parity -------------------------------------------------------------------------------

    def parity(self, plan: Plan) -> list[str]:
        """Why the migration cannot start (empty: it can). A session that an agent reads down
        is read again for up to `session_settle_s`: an agent reads its sessions every few
        seconds, so right after they came up (a deployment just brought up, a restarted
        router) its last reading may still say down."""
        start = self.clock()
        while True:
            problems = self._parity_once(plan)
            sessions = [p for p in problems if _SESSION_PROBLEM.search(p)]
            if not sessions or len(sessions) < len(problems) or \
                    self.clock() - start >= self.session_settle_s:
                return problems
            self.log("parity: waiting for " + "; ".join(sessions))
            self.beat()
            self.sleep(1.0)

    def _parity_once(self, plan: Plan) -> list[str]:
        try:
            sides = self.sides(plan)
        except DriverError as exc:
            return [str(exc)]
        problems = []
        if not sides.agents:
            problems.append(f"no {AGENT_KIND} gateway in the intent")
        if not sides.legacy:
            problems.append("no legacy gateway given")
        statuses = self.statuses()
        now = self.wall()
        for gw in sides.agents:
            st = statuses.get(gw)
            if st is None:
                problems.append(f"{gw}: no agent has reported")
                continue
            problems += [f"{gw}: {p}" for p in _status_problems(st, now)]
            mode = (st.get("routing") or {}).get("mode")
            if mode != "managed":
                problems.append(f"{gw}: its agent does not manage its routing (mode {mode!r}): "
                                "it could not apply the steps (docs/routing.md)")
            try:
                s = self.sample(gw, st)
            except ScrapeError as exc:
                problems.append(f"{gw}: {exc}")
                continue
            problems += [f"{gw}: BGP session with {p} is not Established"
                         for p, up in sorted(s.bgp.items()) if not up]
            problems += [f"{gw}: BFD session with {p} is not up"
                         for p, up in sorted(s.bfd.items()) if not up]
            if not s.bgp:
                problems.append(f"{gw}: its agent reports no BGP session")
        for gw in sides.legacy:
            try:
                self.legacy.forwarded_packets(gw)
            except Exception as exc:  # an adapter's command may fail any way
                problems.append(f"{gw}: the legacy adapter cannot read its counter: {exc}")
        if plan.canary and not sides.canary_prefixes:
            problems.append(f"no VPC {plan.canary!r} in the stored intent for the canary")
        fits = getattr(self.legacy, "plan_problems", None)
        if fits is not None:  # an adapter that cannot take every weight says which
            problems += list(fits(plan.steps))
        return problems

    # ---- moves --------------------------------------------------------------------------------

    def set_canary(self, plan: Plan, on: bool) -> None:
        """The canary VPC on the target crosszone gateways alone (on), or back (off)."""
        sides = self.sides(plan)
        self._canary_on = on and bool(sides.canary_vpcs)
        if not sides.canary_vpcs:
            return
        self._perform(plan_canary(sides, self._weight_now(), on),
                      "canary " + ("on" if on else "off"))

    def set_weight(self, plan: Plan, weight_new: int) -> float:
        """Move to `weight_new` percent on the target; ms until every agent applied it and
        the target's share of forwarded packets reached it (last_move has the parts)."""
        sides = self.sides(plan)
        t0 = self.clock()
        lost0 = len(self.lost)
        announced, applied = self._perform(plan_move(sides, weight_new, self._canary_on),
                                           f"step {weight_new}%")
        self._weight = weight_new
        share, reached = (None, False) if len(self.lost) > lost0 else \
            self._wait_share(plan, weight_new, lost0)
        done = self.clock()
        self.last_move = {"weight_new": weight_new,
                          "announce_ms": round((announced - t0) * 1000, 1),
                          "applied_ms": round((applied - t0) * 1000, 1),
                          "converge_ms": round((done - t0) * 1000, 1),
                          "share": None if share is None else round(share, 2),
                          "share_unit": self.share_unit or None,
                          "share_reached": reached}
        return (done - t0) * 1000

    def retire(self, plan: Plan) -> list[str]:
        """Withdraw the source gateways; the target announces without weights."""
        sides = self.sides(plan)
        self._perform(plan_retire(sides), "retire")
        self._retired = True
        return list(sides.legacy if sides.agents_are_target else sides.agents)

    def _perform(self, move: Move, what: str) -> tuple[float, float]:
        """The legacy actions before, the agents' routing objects (one transaction); once
        every agent applied its object and the routers had `announce_settle_s` to take the
        announcement, the legacy actions after (make-before-break: the canary's prefixes,
        a drain or a withdrawal on the source side only follow the target's announcement).
        Returns the clock when the objects were written and when the move was complete."""
        self._legacy(move.before)
        wanted = self._write_states(move)
        announced = self.clock()
        self._wait_applied(wanted, what)
        if move.after:
            self.sleep(self.announce_settle_s)
            self._legacy(move.after)
        return announced, self.clock()

    def _legacy(self, actions: tuple[LegacyAction, ...]) -> None:
        """Perform the legacy actions, every gateway at once and each gateway's in their order
        (a command adapter's action is a process: one after the other they added up to seconds
        per move on the emulator); a gateway stops at its first failure, which is raised once
        all ended."""
        if not actions:
            return
        per_gateway: dict[str, list[LegacyAction]] = {}
        for a in actions:
            per_gateway.setdefault(a.gateway, []).append(a)

        def run(mine: list[LegacyAction]) -> None:
            for a in mine:
                self._legacy_one(a)

        with ThreadPoolExecutor(max_workers=len(per_gateway)) as pool:
            futures = [pool.submit(run, mine) for mine in per_gateway.values()]
        for f in futures:
            f.result()

    def _legacy_one(self, a: LegacyAction) -> None:
        try:
            if a.verb == "set_weight":
                assert a.value is not None
                self.legacy.set_weight(a.gateway, a.value)
            elif a.verb == "drain":
                self.legacy.drain(a.gateway)
            elif a.verb == "withdraw":
                self.legacy.withdraw(a.gateway, a.prefixes)
            elif a.verb == "restore":
                self.legacy.restore(a.gateway, a.prefixes)
            else:
                raise DriverError(f"unknown legacy action {a.verb}")
        except DriverError:
            raise
        except Exception as exc:  # an operator's command may fail any way
            raise DriverError(f"legacy gateway {a.gateway}: {a.verb} failed: {exc}") from None

    def _write_states(self, move: Move) -> dict[str, int]:
        """Write every agent's routing object in one transaction: gateway -> revision."""
        if not move.states:
            return {}
        rev = routing.next_revision(self.store)
        objs = {gw: GatewayRouting(revision=rev, by="migration", canary=s.canary,
                                   canary_vpcs=s.canary_vpcs, bandwidth_mbps=s.bandwidth_mbps,
                                   graceful_shutdown=s.graceful_shutdown, withdraw=s.withdraw)
                for gw, s in move.states.items()}
        self.store.put_many({routing.key(gw): o.to_bytes() for gw, o in objs.items()})
        return dict.fromkeys(objs, rev)

    def _wait_applied(self, wanted: dict[str, int], what: str) -> None:
        """Until every agent reports FRR holds its revision; a gateway lost meanwhile (or that
        did not apply within apply_timeout_s) is drained and no longer waited for."""
        start = said = self.clock()
        while True:
            statuses = self.statuses()
            self.check_lost(statuses=statuses)
            pending = _pending({g: r for g, r in wanted.items() if g not in self.lost},
                               statuses)
            if not pending:
                return
            now = self.clock()
            if now - said >= self.log_every_s:
                said = now
                self.log(f"{what}: waiting {now - start:.0f} s for "
                         + "; ".join(f"{gw} ({why})" for gw, why in sorted(pending.items())))
            if self.apply_timeout_s is not None and now - start > self.apply_timeout_s:
                self.drain({gw: f"{what} not applied within {self.apply_timeout_s:g} s "
                                f"(apply_timeout_s): {why}" for gw, why in pending.items()})
                return
            self.beat()
            self.sleep(self.poll_s)

    # ---- convergence --------------------------------------------------------------------------

    def _counts(self, plan: Plan) -> tuple[int, int] | None:
        """(traffic forwarded by the target side, by the source side) so far, or None when a
        counter cannot be read: bytes when every legacy gateway's bytes counter reads (a
        kernel gateway's GRO-merged packets are not comparable with the fast path's frames,
        legacy_adapter's module doc), else packets; `share_unit` says which."""
        statuses = self.statuses()
        agents = self._agents()

        def agent(gw: str) -> tuple[int, int]:
            s = self.sample(gw, statuses.get(gw, {}))
            return s.forwarded, s.forwarded_bytes

        def legacy_one(gw: str) -> tuple[int, int | None]:
            b = self.legacy.forwarded_bytes(gw) if self.share_unit != "packets" else None
            return int(self.legacy.forwarded_packets(gw)), None if b is None else int(b)
        jobs: list[Callable[[], tuple[int, int | None]]] = [
            partial(agent, gw) for gw in agents]
        jobs += [partial(legacy_one, gw) for gw in self.legacy_gateways]
        try:
            # all at once: each is a scrape or an adapter's process, and the share is only as
            # fresh as the slowest of them
            with ThreadPoolExecutor(max_workers=max(1, len(jobs))) as pool:
                got = [f.result() for f in [pool.submit(j) for j in jobs]]
            if self.share_unit != "packets" and all(b is not None for _, b in got):
                self.share_unit = "bytes"
                counts = [b or 0 for _, b in got]
            else:
                self.share_unit = "packets"  # once a side cannot say bytes, packets it stays
                counts = [p for p, _ in got]
            new, legacy = sum(counts[:len(agents)]), sum(counts[len(agents):])
        except Exception as exc:  # a scrape or an adapter's command: the share waits
            why = f"share: {exc}"
            if why != self._share_said:  # said once, not at every poll
                self._share_said = why
                self.log(why)
            return None
        self._share_said = ""
        return (new, legacy) if plan.target == AGENT_KIND else (legacy, new)

    def _wait_share(self, plan: Plan, weight: int, lost0: int = 0
                    ) -> tuple[float | None, bool]:
        """Until the target's share (percent) of the packets forwarded over the last
        window_s is within the tolerance of `weight`: (the last share read, reached). A guard
        breach, or a gateway lost (beyond the `lost0` lost before the move), ends it."""
        start = guarded = self.clock()
        window: deque[tuple[float, int, int]] = deque()
        share: float | None = None
        while True:
            now = self.clock()
            if now - guarded >= self.guard_every_s:
                guarded = now
                if self.check_lost(plan) or len(self.lost) > lost0:
                    self.log(f"step {weight}%: a gateway was lost while the share was read; "
                             "the step ends here")
                    return share, False
                if self.guard_check is not None and self.guard_check():
                    self.log(f"step {weight}%: a guard failed while the share was read; "
                             "the step ends here")
                    return share, False
            c = self._counts(plan)
            if c is not None and window and (c[0] < window[-1][1] or c[1] < window[-1][2]):
                window.clear()  # a counter went back (a gateway's fast path re-attached)
            if c is not None:
                window.append((now, *c))
                while len(window) > 2 and now - window[1][0] >= self.share_window_s:
                    window.popleft()
                t0, new0, old0 = window[0]
                new, old = c[0] - new0, c[1] - old0
                if now - t0 >= self.share_window_s * 0.999 and \
                        new + old >= self.share_min_packets:
                    share = 100.0 * new / (new + old)
                    if abs(share - weight) <= self.share_tolerance:
                        return share, True
            if now - start >= self.share_timeout_s:
                self.log(f"step {weight}%: the new gateways' share of forwarded "
                         f"{self.share_unit or 'packets'} "
                         + (f"read {share:.1f}%" if share is not None else "could not be read "
                            "(too little traffic)")
                         + f" after {self.share_timeout_s:g} s (tolerance "
                         f"{self.share_tolerance:g} points); going on")
                return share, False
            self.beat()
            self.sleep(self.poll_s)

    # ---- guards -------------------------------------------------------------------------------

    def probe_canary(self, plan: Plan) -> dict[str, float]:
        """The canary probes' verdicts against the production probes' latency."""
        canary = self.probes.read("canary")
        prod = self.probes.read("production")
        if prod is not None and prod.reads:
            self.baseline_p99_ms = max(prod.p99_ms, LATENCY_FLOOR_MS)
        base = self.baseline_p99_ms or LATENCY_FLOOR_MS
        if canary is None:
            # no canary probe reports: the canary cannot pass
            return {"canary_errors": 1.0, "canary_latency_factor": 0.0} if plan.canary else {}
        return {"canary_errors": float(canary.errors),
                "canary_latency_factor": round(canary.p99_ms / base, 3)}

    def observe(self, plan: Plan) -> dict[str, float]:
        """Guard readings (plan.GUARD_DOCS)."""
        out: dict[str, float] = {}
        prod = self.probes.read("production")
        if prod is not None:
            if self.baseline_p99_ms is None and prod.reads:
                self.baseline_p99_ms = max(prod.p99_ms, LATENCY_FLOOR_MS)
            out["errors"] = float(prod.errors)
            out["small_p99_factor"] = round(prod.p99_ms / (self.baseline_p99_ms
                                                           or LATENCY_FLOOR_MS), 3)
        statuses = self.statuses()
        now = self.wall()
        drops = down = unhealthy = 0
        targets = set(self._target_agents(plan))
        carrying = targets if (self._weight or 0) > 0 else set()
        self._evidence, self._forwarded = {}, {}
        for gw in self._live_agents(plan):
            st = statuses.get(gw, {})
            why = _status_problems(st, now) if st else ["no status"]
            try:
                s = self.sample(gw, st)
                self._slow.discard(gw)
            except ScrapeError as exc:
                if exc.slow and gw not in self._slow:
                    self._slow.add(gw)  # one slow reading is the box, two are the agent
                    self.log(f"agent of {gw}: {exc} (counts if slow again next reading)")
                else:
                    why.append(str(exc))
                s = None
            if why:
                unhealthy += 1
                self.log(f"agent of {gw}: {'; '.join(why)}")
            evidence = self._evidence.setdefault(gw, [f"agent: {w}" for w in why])
            if s is None:
                continue
            gone = [f"BGP session with {p} down" for p, up in sorted(s.bgp.items()) if not up]
            gone += [f"BFD session with {p} down" for p, up in sorted(s.bfd.items()) if not up]
            down += len(gone)
            evidence += gone
            if gw in targets:
                before = self._drops0.get(gw, s.drops)
                rose = {r: n - before.get(r, 0) for r, n in s.drops.items()
                        if n > before.get(r, 0)}
                if sum(s.drops.values()) >= sum(before.values()):  # not a re-attached program
                    drops += sum(rose.values())
                    if rose:
                        evidence.append(f"fast path dropped {sum(rose.values())} packets ("
                                        + ", ".join(f"{r} {n}" for r, n in sorted(rose.items()))
                                        + ")")
                self._drops0[gw] = dict(s.drops)
            if gw in carrying:
                if gw in self._fwd0 and s.forwarded >= self._fwd0[gw]:
                    self._forwarded[gw] = s.forwarded - self._fwd0[gw]
                self._fwd0[gw] = s.forwarded
            else:
                self._fwd0.pop(gw, None)
        out.update({"drops": float(drops), "sessions_down": float(down),
                    "agents_unhealthy": float(unhealthy)})
        return out

    def source_packets(self, plan: Plan) -> int:
        """Packets the source side has forwarded so far."""
        c = None
        for _ in range(3):
            c = self._counts(plan)
            if c is not None:
                return c[1]
            self.sleep(self.poll_s)
        raise DriverError("cannot read the source gateways' forwarded-packet counters")


def _status_problems(st: dict[str, Any], now: float) -> list[str]:
    """What is wrong with an agent, from its status: health, staleness."""
    out = []
    if st.get("health") != "ok":
        out.append(f"agent reports health {st.get('health')!r}"
                   + (f": {st['message']}" if st.get("message") else ""))
    try:
        age = now - float(st.get("updated", 0))
    except (TypeError, ValueError):
        age = float("inf")
    if age > STATUS_STALE_S:
        out.append(f"last status {age:.0f} s ago (agent down?)")
    return out


def _pending(wanted: dict[str, int], statuses: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Gateways whose agent has not reported applying its revision: gateway -> why."""
    out = {}
    for gw, rev in wanted.items():
        r = (statuses.get(gw) or {}).get("routing") or {}
        got = r.get("state_revision")
        if isinstance(got, int) and got >= rev:
            continue
        if r.get("mode") == "error":
            out[gw] = f"FRR refused it: {r.get('message', '')}"[:300]
        elif r.get("state_error"):
            out[gw] = f"routing object rejected: {r['state_error']}"
        else:
            out[gw] = f"applied revision {got}, wants {rev}"
    return out
