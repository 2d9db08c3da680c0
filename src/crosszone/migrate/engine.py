"""The migration state machine: canary, weighted steps, guards, rollback, drain, persisted.

The engine never touches a network itself: a `Driver` announces weights, runs probes and reads
guards (the emulator implements one, `emulate/migration.py`; unit tests use a fake). Everything
the engine decides is persisted in the store under `migration/state` before it acts on the next
thing, so a killed runner (or controller) resumes where it was: `resume` re-asserts the weight
of the step it was in and continues that step's dwell.

Operators act through commands (`migration/command`): `crosszone migrate pause|resume|rollback|
finish` and the controller's POST /v1/migration/{op} write one, and the runner, the one process
that holds the driver, performs it at its next tick. The runner proves it is alive with a
heartbeat (`migration/runner`); when none is alive, the CLI becomes the runner itself.

Time is injected (`clock`, `sleep`) so that tests run a whole migration in milliseconds.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from crosszone.migrate.plan import CANARY_DOCS, GUARD_DOCS, Plan
from crosszone.store.store import Store

KEY = "migration/state"
COMMAND = "migration/command"
RUNNER = "migration/runner"

#: States in which a runner has work to do (or holds a position under monitoring).
ACTIVE = ("canary", "shifting", "paused", "shifted", "draining")
#: States after which nothing happens until a new `start`.
FINAL = ("none", "finished", "rolled_back")
OPS = ("start", "pause", "resume", "rollback", "finish")
#: Keys of a driver's `last_move` that the history keeps with each weight move.
MOVE_DETAILS = ("applied_ms", "share", "share_reached")
#: A runner whose heartbeat is older than this is taken for dead (kill -9 leaves no goodbye).
RUNNER_TIMEOUT_S = 5.0


class MigrationError(RuntimeError):
    """An operation that does not apply to the current state, or a refused start."""


class Refused(MigrationError):
    """`start` refused by the parity check; nothing was changed."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("migration refused, nothing changed:\n  " + "\n  ".join(problems))
        self.problems = problems


class Driver(Protocol):
    """What the engine needs of a deployment."""

    def parity(self, plan: Plan) -> list[str]:
        """Why the target gateways cannot take traffic (empty: they can)."""
        ...

    def set_canary(self, plan: Plan, on: bool) -> None:
        """Serve (or stop serving) the canary prefix through the target gateways only."""
        ...

    def probe_canary(self, plan: Plan) -> dict[str, float]:
        """One round of canary probes: a value for each canary check (plan.CANARY_DOCS)."""
        ...

    def set_weight(self, plan: Plan, weight_new: int) -> float:
        """Move to `weight_new` percent on the target gateways (0: source only; 100: source
        drained); return ms from the announcement until both routers' kernels hold it."""
        ...

    def observe(self, plan: Plan) -> dict[str, float]:
        """One round of guard readings: a value for each guard it can read (plan.GUARD_DOCS)."""
        ...

    def source_packets(self, plan: Plan) -> int:
        """Packets the source gateways have forwarded so far (a counter; finish waits for it
        to stand still over a dwell)."""
        ...

    def retire(self, plan: Plan) -> list[str]:
        """Withdraw the source gateways; return their names."""
        ...


@dataclass
class State:
    """The persisted migration (`migration/state`; contract: state, step, weight_new, history,
    guards; the rest is the engine's own bookkeeping)."""

    state: str = "none"
    step: int = 0                       # index into plan.steps, 1-based (0: before any)
    weight_new: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    guards: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] | None = None
    since: float = 0.0                  # clock when the current dwell began
    last_good: int = 0                  # last step whose dwell held (0: canary)
    paused_from: str | None = None      # state to go back to on resume
    reason: str | None = None           # why the last automatic action was taken
    retired: list[str] = field(default_factory=list)
    drain_mark: int | None = None       # source packet counter when the drain dwell began

    def to_json(self) -> dict[str, Any]:
        """The stored document."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> State:
        """A stored document (unknown keys ignored: a newer writer may add some)."""
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def the_plan(self) -> Plan:
        """The plan this migration runs (raises if there is none)."""
        if self.plan is None:
            raise MigrationError("no migration has been started")
        return Plan.from_json(self.plan)


def read_state(store: Store) -> State:
    """The stored migration, or State() (state 'none') when there is none or it is unreadable."""
    raw = store.get(KEY)
    if raw is None:
        return State()
    try:
        return State.from_json(json.loads(raw))
    except (ValueError, TypeError):
        return State(reason="the stored migration state is unreadable")


def status(store: Store) -> dict[str, Any]:
    """What `migrate status --json` and GET /v1/migration print."""
    st = read_state(store).to_json()
    st["runner"] = runner_info(store)
    return st


def runner_info(store: Store) -> dict[str, Any] | None:
    """The runner's last heartbeat ({pid, host, beat}), or None."""
    raw = store.get(RUNNER)
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def runner_alive(store: Store, now: float) -> bool:
    """Whether a runner's heartbeat is fresh (it will perform commands)."""
    info = runner_info(store)
    return bool(info) and now - float(info.get("beat", 0)) < RUNNER_TIMEOUT_S  # type: ignore[union-attr]


def check_op(state: State, op: str) -> None:
    """Raise MigrationError when `op` does not apply in `state` (said in operator terms)."""
    s = state.state
    if op not in OPS:
        raise MigrationError(f"unknown operation {op!r} (one of {', '.join(OPS)})")
    allowed = {
        "start": FINAL,
        "pause": ("canary", "shifting", "shifted"),
        "resume": ACTIVE,
        "rollback": ACTIVE,
        "finish": ("shifted",),
    }[op]
    if s not in allowed:
        hint = {"finish": "finish needs all traffic on the new gateways (state 'shifted')",
                "start": "a migration is already under way: resume, rollback or finish it"}
        raise MigrationError(f"cannot {op} a migration in state {s!r}"
                             + (f": {hint[op]}" if op in hint else ""))


def submit(store: Store, op: str, clock: Callable[[], float] = time.time,
           plan: Plan | None = None, reason: str = "operator") -> None:
    """Record an operator's command for the runner (checked against the state first)."""
    check_op(read_state(store), op)
    doc: dict[str, Any] = {"op": op, "t": clock(), "reason": reason}
    if plan is not None:
        doc["plan"] = plan.to_json()
    store.put(COMMAND, json.dumps(doc).encode())


def _guard_rows(values: dict[str, float], limits: dict[str, float],
                names: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": k, "value": values[k], "limit": limits[k], "ok": values[k] <= limits[k]}
            for k in names if k in values]


class Engine:
    """Drives one migration through a Driver and persists every step in a Store."""

    def __init__(self, store: Store, driver: Driver, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, tick_s: float = 0.5,
                 log: Callable[[str], None] = lambda _m: None) -> None:
        self.store, self.driver = store, driver
        self.clock, self.sleep, self.tick_s, self.log = clock, sleep, tick_s, log
        self.state = read_state(store)
        #: events of this runner in order (the bench reads converge_ms from them)
        self.events: list[dict[str, Any]] = []

    # ---- persistence -------------------------------------------------------------------------

    def _save(self) -> None:
        self.store.put(KEY, json.dumps(self.state.to_json()).encode())

    def _record(self, event: str, reason: str | None = None, **extra: Any) -> None:
        s = self.state
        entry = {"t": round(self.clock(), 3), "event": event, "step": s.step,
                 "weight_new": s.weight_new, "reason": reason, **extra}
        s.history.append(entry)
        self.events.append(entry)
        self.log(f"{event}: step {s.step}, weight_new {s.weight_new}%"
                 + (f" ({reason})" if reason else ""))
        self._save()

    def heartbeat(self) -> None:
        """Tell operators (and the controller) that this runner performs commands."""
        self.store.put(RUNNER, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                           "beat": self.clock()}).encode())

    def release(self) -> None:
        """Give up the runner role (a clean exit; a killed runner just times out)."""
        self.store.put_many({RUNNER: None})

    # ---- operations ---------------------------------------------------------------------------

    def start(self, plan: Plan) -> State:
        """Parity check, then the canary. Refused (nothing written) if parity fails."""
        check_op(self.state, "start")
        problems = self.driver.parity(plan)
        if problems:
            raise Refused(problems)
        self.state = State(state="canary", plan=plan.to_json(), since=self.clock())
        self._record("start", f"{plan.source} -> {plan.target}, steps {list(plan.steps)}")
        self.driver.set_canary(plan, True)
        self._record("canary_on", f"canary VPC {plan.canary}" if plan.canary else None)
        return self.state

    def apply(self, op: str, reason: str = "operator", plan: Plan | None = None) -> State:
        """Perform an operator's operation now (the runner calls this for each command)."""
        if op == "start":
            return self.start(plan or Plan())
        check_op(self.state, op)
        s = self.state
        if op == "pause":
            s.paused_from, s.state = s.state, "paused"
            self._record("pause", reason)
        elif op == "resume":
            if s.state == "paused":
                s.state = s.paused_from or "shifting"
                s.paused_from = None
            s.since = self.clock()  # the dwell starts again
            self._reassert()
            self._record("resume", reason)
        elif op == "rollback":
            self._rollback_all(reason)
        elif op == "finish":
            s.state, s.since = "draining", self.clock()
            s.drain_mark = self.driver.source_packets(s.the_plan)
            self._record("drain", reason)
        return s

    def _reassert(self) -> None:
        """After a restart, put the network back where the state says it is (idempotent)."""
        s, plan = self.state, self.state.the_plan
        self.driver.set_canary(plan, True)
        if s.state in ("shifting", "shifted", "draining") or s.weight_new:
            self.driver.set_weight(plan, s.weight_new)

    def _set_weight(self, weight: int, event: str, reason: str | None = None) -> None:
        ms = self.driver.set_weight(self.state.the_plan, weight)
        self.state.weight_new = weight
        # what a driver says about the move beyond its time (agent_driver: when the agents
        # had applied it, the traffic share it reached), kept in the history beside converge_ms
        details = getattr(self.driver, "last_move", None) or {}
        extra = {k: details[k] for k in MOVE_DETAILS if k in details}
        self._record(event, reason, converge_ms=round(ms, 1), **extra)

    def _rollback_all(self, reason: str) -> None:
        s = self.state
        self._set_weight(0, "rollback", reason)
        self.driver.set_canary(s.the_plan, False)
        s.state, s.step, s.reason, s.paused_from = "rolled_back", 0, reason, None
        self._record("rolled_back", reason)

    def _breach(self, failed: list[dict[str, Any]]) -> None:
        """Roll back to the last good step (or all the way) and say why."""
        s = self.state
        why = "; ".join(f"{g['name']} {g['value']:g} > {g['limit']:g}" for g in failed)
        reason = f"guard breached at step {s.step} ({s.weight_new}%): {why}"
        if s.state == "canary" or s.last_good == 0:
            self._rollback_all(reason)
            return
        plan = s.the_plan
        s.step = s.last_good
        self._set_weight(plan.steps[s.last_good - 1], "rollback_step", reason)
        s.state, s.paused_from, s.reason, s.since = "paused", "shifting", reason, self.clock()
        self._record("pause", reason)

    # ---- the machine --------------------------------------------------------------------------

    def tick(self) -> State:
        """One round: perform a pending command, read guards, advance when a dwell held."""
        self.heartbeat()
        self._take_command()
        s = self.state
        if s.state not in ACTIVE:
            return s
        plan = s.the_plan
        if s.state == "canary":
            values = self.driver.probe_canary(plan)
            s.guards = _guard_rows(values, plan.limits, CANARY_DOCS)
        else:
            values = self.driver.observe(plan)
            s.guards = _guard_rows(values, plan.limits, GUARD_DOCS)
        failed = [g for g in s.guards if not g["ok"]]
        if failed and s.state != "paused":
            self._breach(failed)
            return self.state
        self._save()
        if self.clock() - s.since < (plan.canary_dwell_s if s.state == "canary"
                                     else plan.dwell_s):
            return s
        if s.state == "canary":
            self._record("canary_ok")
            self._next_step(plan)
        elif s.state == "shifting":
            s.last_good = s.step
            self._record("step_ok")
            self._next_step(plan)
        elif s.state == "draining":
            self._drain_check(plan)
        return s

    def _next_step(self, plan: Plan) -> None:
        s = self.state
        if s.step >= len(plan.steps):
            s.state = "shifted"
            self._record("shifted", "all traffic on the new gateways: `finish` retires the old")
            return
        s.step += 1
        s.state = "shifting"
        self._set_weight(plan.steps[s.step - 1], "step")
        s.since = self.clock()
        self._save()

    def _drain_check(self, plan: Plan) -> None:
        s = self.state
        now = self.driver.source_packets(plan)
        moved = now - (s.drain_mark or 0)
        if moved > 0:
            s.drain_mark, s.since = now, self.clock()
            self._record("drain_wait", f"{plan.source} gateways forwarded {moved} packets "
                                       "during the dwell")
            return
        s.retired = self.driver.retire(plan)
        s.state = "finished"
        self._record("finished", f"retired {', '.join(s.retired)}")

    def _take_command(self) -> None:
        raw = self.store.get(COMMAND)
        if raw is None:
            return
        self.store.put_many({COMMAND: None})
        try:
            cmd = json.loads(raw)
            plan = Plan.from_json(cmd["plan"]) if "plan" in cmd else None
            self.apply(str(cmd["op"]), str(cmd.get("reason", "operator")), plan)
        except Refused as exc:
            self.state.reason = str(exc)
            self.log(str(exc))
        except (MigrationError, ValueError, KeyError, TypeError) as exc:
            self.log(f"command ignored: {exc}")

    def run(self, stop: Callable[[State], bool] | None = None, timeout: float | None = None
            ) -> State:
        """Tick until the migration is final (or `stop` says so, or `timeout` seconds)."""
        stop = stop or (lambda st: st.state in FINAL)
        t0 = self.clock()
        if self.state.state in ACTIVE:
            self._reassert()
            self._record("runner_attached")
        try:
            while True:
                st = self.tick()
                if stop(st) or (timeout is not None and self.clock() - t0 > timeout):
                    return st
                self.sleep(self.tick_s)
        finally:
            self.release()
