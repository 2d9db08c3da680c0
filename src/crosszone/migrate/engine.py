"""The migration state machine: canary, weighted steps, guards, rollback, drain, persisted.

The engine never touches a network itself: a `Driver` announces weights, runs probes and reads
guards (the emulator implements one, `emulate/migration.py`; unit tests use a fake). Everything
the engine decides is persisted in the store under `migration/state` before it acts on the next
thing, so a killed runner (or controller) resumes where it was: `resume` re-asserts the weight
of the step it was in and continues that step's dwell from when the step began.

Exactly one process, the runner, writes the state: it holds the lease `migration/runner`
(`lease.py`: an owner, renewed during long actions, taken over only once expired, released only
by its owner), and it writes the state by compare-and-swap, so a runner that lost its lease
cannot overwrite what its successor wrote (`Superseded`). The state is written when it changed
(guard values alone at most every GUARDS_SAVE_S), before and after each move (`moving_to`: a
kill mid-move is found and the routing put back where the state says), and its history keeps
the last HISTORY_KEEP entries, older ones folded into one summary entry.

Operators act through a queue of operations (`op_queue.py`, `migration/op/<id>`):
`crosszone migrate pause|resume|rollback|finish` and the controller's POST /v1/migration/{op}
queue one for the live runner, which performs it at its next tick and answers it (done,
refused and why, expired); when no runner is alive, the CLI becomes the runner itself.

What comes from the store is checked before it is used: the state document field by field, its
plan by the plan schema (`plan_schema.py`). A state that cannot be used reads as such
(`error` says why; `unreadable` when the document itself is not one) and every operation on it
is refused with that reason, instead of a runner or the API failing on it.

The latency baseline that `small_p99_factor` divides by (a driver's `baseline_p99_ms`, taken
during the canary, before the first step) is kept in the state (`baselines`) and handed back to
the driver of a resumed runner, so it is not taken again mid-migration.

A crosszone gateway lost during the migration (lost_gateways.py: its agent failed closed, went
silent for the plan's `agent_lost_s`, or did not apply a move in time) is drained by the driver
at once; the engine names it in the state (`lost`, a `gateway_lost` history entry, the reason)
and rolls the migration back over the other gateways, a handled outcome like a guard breach. A
breach the driver attributes to one gateway (`attribute`) drains that gateway the same way.

Time is injected (`clock`, `sleep`) so that tests run a whole migration in milliseconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from crosszone.migrate import lease as leases
from crosszone.migrate import op_queue
from crosszone.migrate.lease import Lease, LeaseError, LeaseLost
from crosszone.migrate.plan import CANARY_DOCS, GUARD_DOCS, Plan, PlanError
from crosszone.migrate.plan_schema import checked, plan_from_json
from crosszone.migrate.record import ACTIVE as ACTIVE
from crosszone.migrate.record import FINAL as FINAL
from crosszone.migrate.record import HISTORY_KEEP as HISTORY_KEEP
from crosszone.migrate.record import KEY as KEY
from crosszone.migrate.record import UNREADABLE as UNREADABLE
from crosszone.migrate.record import MigrationError as MigrationError
from crosszone.migrate.record import State as State
from crosszone.migrate.record import decode, fold_history, num
from crosszone.store.store import Store

RUNNER = leases.RUNNER
OP_PREFIX = op_queue.OP_PREFIX
#: The id of the one start operation that may be pending (op_queue.claim_single).
PENDING_START = "migration/start_pending"

OPS = ("start", "pause", "resume", "rollback", "finish")
#: Keys of a driver's `last_move` that the history keeps with each weight move.
MOVE_DETAILS = ("applied_ms", "share", "share_unit", "share_reached")
#: A runner whose lease was not renewed for this long is taken for dead (kill -9 leaves no
#: goodbye); its lease may then be taken over.
RUNNER_TIMEOUT_S = leases.LEASE_TTL_S
#: Guard values that changed, and nothing else, are written at most this often.
GUARDS_SAVE_S = 5.0
#: The driver attribute that holds its latency baseline (ms), if it has one.
BASELINE_ATTR = "baseline_p99_ms"
#: The driver attribute that names the gateways it lost and drained (gateway -> why), if any.
LOST_ATTR = "lost"


class Refused(MigrationError):
    """`start` refused by the parity check (or its plan); nothing was changed."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("migration refused, nothing changed:\n  " + "\n  ".join(problems))
        self.problems = problems


class Superseded(LeaseLost):
    """Another writer changed the migration state since this runner read it: it stops."""


class Driver(Protocol):
    """What the engine needs of a deployment.

    Optional: a `baseline_p99_ms` attribute (the latency the `small_p99_factor` guard divides
    by). The engine stores it once the canary took it and sets it back on the driver of a
    resumed runner (BASELINE_ATTR). Optional too, for lost gateways (agent_driver implements
    them): a `lost` dict (gateway -> why, each already drained; LOST_ATTR), `check_lost(plan)`
    (read at every tick), `attribute(plan, failed_guards)` (the one gateway a breach points
    at: gateway -> why) and `drain(gateways)` (take those out as lost)."""

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



def read_state(store: Store) -> State:
    """The stored migration (see decode)."""
    return decode(store.get(KEY))


def status(store: Store, now: float | None = None) -> dict[str, Any]:
    """What `migrate status --json` and GET /v1/migration print: the state document (with
    `error` when it cannot be used), the runner's lease and the last operations."""
    now = time.time() if now is None else now
    st = read_state(store).to_json()
    st["runner"] = runner_info(store)
    st["runner_alive"] = runner_alive(store, now)
    st["ops"] = op_queue.recent(store, now)
    return st


def runner_info(store: Store) -> dict[str, Any] | None:
    """The runner's lease ({owner: {host, pid, nonce}, expires, beat}), or None."""
    return leases.read(store)


def runner_alive(store: Store, now: float) -> bool:
    """Whether a runner holds a live lease (it will perform queued operations)."""
    return leases.alive(store, now) is not None


def check_op(state: State, op: str) -> None:
    """Raise MigrationError when `op` does not apply in `state` (said in operator terms)."""
    s = state.state
    if op not in OPS:
        raise MigrationError(f"unknown operation {op!r} (one of {', '.join(OPS)})")
    if state.error and not (op == "start" and s in FINAL):
        raise MigrationError(f"cannot {op}: {state.error} (fix or delete the store key {KEY}; "
                             "nothing acts on it)")
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
           plan: Plan | None = None, reason: str = "operator") -> dict[str, Any]:
    """Queue an operator's operation for the live runner (checked against the state first,
    a start's plan by the schema); the operation's document (`op_queue`)."""
    check_op(read_state(store), op)
    plan_doc = None
    if op == "start":
        try:
            plan_doc = checked(plan or Plan()).to_json()
        except PlanError as exc:
            raise MigrationError(str(exc)) from None
    now = clock()
    info = leases.alive(store, now)
    runner = str(info["owner"]["nonce"]) if info else None
    doc = op_queue.queue(store, op, now, reason, runner, plan_doc)
    if op == "start":  # of two starts queued at once, exactly one is taken
        held = op_queue.claim_single(store, PENDING_START, doc, now, runner)
        if held is not None:
            why = (f"another start is queued already (operation {held['id']}, "
                   f"{held['status']}): its answer says whether the migration began")
            op_queue.withdraw(store, doc["id"], now, why)
            raise MigrationError(why)
    return doc


def _guard_rows(values: dict[str, float], limits: dict[str, float],
                names: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": k, "value": values[k], "limit": limits[k], "ok": values[k] <= limits[k]}
            for k in names if k in values and num(values[k])]


class Engine:
    """Drives one migration through a Driver and persists every step in a Store."""

    def __init__(self, store: Store, driver: Driver, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, tick_s: float = 0.5,
                 log: Callable[[str], None] = lambda _m: None, lease: Lease | None = None
                 ) -> None:
        self.store, self.driver = store, driver
        self.clock, self.sleep, self.tick_s, self.log = clock, sleep, tick_s, log
        self.lease = lease or Lease(store, clock)
        self.state, self._rev = self._read()
        #: events of this runner in order (the bench reads converge_ms from them)
        self.events: list[dict[str, Any]] = []
        self._saved: tuple[str, str, float] | None = None  # body, shape, when
        self._attached = False
        #: guards that failed while a step's move waited for its traffic share (_watch)
        self._failed_in_move: list[dict[str, Any]] = []

    # ---- persistence -------------------------------------------------------------------------

    def _read(self) -> tuple[State, int]:
        raw, rev = self.store.get_versioned(KEY)
        return decode(raw), rev

    def _save(self) -> None:
        """Write the state if it changed (guard values alone: at most every GUARDS_SAVE_S), by
        compare-and-swap against the revision this runner last read or wrote."""
        doc = self.state.to_json()
        doc.pop("error", None)
        body = json.dumps(doc)
        shape = json.dumps({**doc, "guards": [(g["name"], g["ok"]) for g in doc["guards"]]})
        now = self.clock()
        if self._saved is not None and (body == self._saved[0] or (
                shape == self._saved[1] and now - self._saved[2] < GUARDS_SAVE_S)):
            return
        rev = self.store.put_if(KEY, body.encode(), self._rev)
        if rev is None:
            raise Superseded(f"the migration state was changed by another writer since "
                             f"revision {self._rev}: this runner stops (`crosszone migrate "
                             "status` shows what the other did)")
        self._rev, self._saved = rev, (body, shape, now)

    def _record(self, event: str, reason: str | None = None, **extra: Any) -> None:
        s = self.state
        entry = {"t": round(self.clock(), 3), "event": event, "step": s.step,
                 "weight_new": s.weight_new, "reason": reason, **extra}
        s.history.append(entry)
        fold_history(s.history)
        self.events.append(entry)
        self.log(f"{event}: step {s.step}, weight_new {s.weight_new}%"
                 + (f" ({reason})" if reason else ""))
        self._save()

    def acquire(self) -> None:
        """Take the runner's lease (RunnerBusy naming the owner of a live one), then read the
        state its previous owner left."""
        if self.lease.held:
            return
        self.lease.acquire()
        self.state, self._rev = self._read()
        self._saved, self._attached = None, False

    def heartbeat(self) -> None:
        """Renew the lease (a driver calls it while a move waits; LeaseLost if it was taken)."""
        self.lease.renew()

    def release(self) -> None:
        """Give up the runner role (a clean exit; a killed runner's lease just expires)."""
        self.lease.release()

    # ---- operations ---------------------------------------------------------------------------

    def _refuse(self, problems: list[str]) -> Refused:
        """A refused start, its reason kept in the state (which stays what it was)."""
        exc = Refused(problems)
        self.state.reason = str(exc)
        self._record("start_refused", "; ".join(problems))
        return exc

    def start(self, plan: Plan) -> State:
        """Parity check, then the canary. Refused (the reason recorded, nothing else changed)
        if the plan or parity fails."""
        self.acquire()
        check_op(self.state, "start")
        try:
            plan = checked(plan)
        except PlanError as exc:
            raise self._refuse([str(exc)]) from None
        problems = self.driver.parity(plan)
        if problems:
            raise self._refuse(problems)
        if isinstance(getattr(self.driver, LOST_ATTR, None), dict):
            setattr(self.driver, LOST_ATTR, {})  # a new migration: parity passed for every one
        self.state = State(state="canary", plan=plan.to_json(), since=self.clock())
        self._attached = True
        self._record("start", f"{plan.source} -> {plan.target}, steps {list(plan.steps)}")
        with self.lease.keep():
            self.driver.set_canary(plan, True)
        self._record("canary_on", f"canary VPC {plan.canary}" if plan.canary else None)
        self._on_lost()
        return self.state

    def apply(self, op: str, reason: str = "operator", plan: Plan | None = None) -> State:
        """Perform an operator's operation now (the runner calls this for each one)."""
        self.acquire()
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
                s.since = self.clock()  # a held step is tried again: its dwell starts again
            # else a runner was killed: the dwell goes on from when the step began
            self._attach()
            self._record("resume", reason)
        elif op == "rollback":
            self._rollback_all(reason)
        elif op == "finish":
            s.state, s.since = "draining", self.clock()
            with self.lease.keep():
                s.drain_mark = self.driver.source_packets(s.the_plan)
            self._record("drain", reason)
        return s

    def _attach(self) -> None:
        """Put the network back where the state says it is (idempotent), once per runner: the
        baseline handed back to the driver, an interrupted move recorded, canary and weight
        re-asserted (history: runner_attached)."""
        if self._attached:
            return
        s, plan = self.state, self.state.the_plan
        if s.moving_to is not None:
            why = (f"the previous runner stopped during the move from {s.weight_new}% to "
                   f"{s.moving_to}%: the routing goes back to {s.weight_new}%")
            s.moving_to = None
            self._record("move_interrupted", why)
        base = s.baselines.get("small_p99_ms")
        if base is not None and hasattr(self.driver, BASELINE_ATTR):
            setattr(self.driver, BASELINE_ATTR, base)
        if isinstance(getattr(self.driver, LOST_ATTR, None), dict):
            setattr(self.driver, LOST_ATTR, dict(s.lost))  # they stay out of every move
        with self.lease.keep():
            self.driver.set_canary(plan, True)
            if s.state in ("shifting", "shifted", "draining") or s.weight_new:
                self.driver.set_weight(plan, s.weight_new)
        self._attached = True
        self._record("runner_attached")
        if not self._on_lost() and s.lost and s.state in ACTIVE:
            # the previous runner stopped between naming a lost gateway and rolling back
            self._rollback_all(f"the previous runner stopped while rolling back after it lost "
                               f"{', '.join(sorted(s.lost))}: rolled back")

    def _keep_baseline(self, retake: bool) -> None:
        """Store the driver's latency baseline (retake: the canary's newest, before the first
        step; else only when none is stored yet)."""
        b = getattr(self.driver, BASELINE_ATTR, None)
        if num(b) and (retake or "small_p99_ms" not in self.state.baselines):
            self.state.baselines["small_p99_ms"] = float(b)

    def _set_weight(self, weight: int, event: str, reason: str | None = None,
                    step: int | None = None, state: str | None = None) -> None:
        """One move: `moving_to` written before it, the new weight (and step, state, dwell
        start) after it, so a kill in between is found by the next runner."""
        s = self.state
        s.moving_to = weight
        self._save()
        # a step's move may wait long for its traffic share (agent_driver): a driver that
        # takes a `guard_check` reads the guards meanwhile and ends the wait on a breach,
        # which is then handled at once instead of after the wait
        watch = event == "step" and hasattr(self.driver, "guard_check")
        if watch:
            self.driver.guard_check = self._watch(s.the_plan)  # type: ignore[attr-defined]
        try:
            with self.lease.keep():
                ms = self.driver.set_weight(s.the_plan, weight)
        finally:
            if watch:
                self.driver.guard_check = None  # type: ignore[attr-defined]
        s.weight_new, s.moving_to = weight, None
        if step is not None:
            s.step = step
        if state is not None:
            s.state, s.since = state, self.clock()
        # what a driver says about the move beyond its time (agent_driver: when the agents
        # had applied it, the traffic share it reached), kept in the history beside converge_ms
        details = getattr(self.driver, "last_move", None) or {}
        extra = {k: details[k] for k in MOVE_DETAILS if k in details}
        self._record(event, reason, converge_ms=round(ms, 1), **extra)
        failed, self._failed_in_move = self._failed_in_move, []
        if event == "rollback":
            self._new_lost()  # named; the rollback goes on over the others
        elif self._on_lost():
            return  # rolled back: what the guards said is moot
        if failed:
            self._breach(failed)

    def _watch(self, plan: Plan) -> Callable[[], bool]:
        """A guard reading for the driver to take while a step's move waits: True (and the
        failed guards kept for _set_weight) on a breach."""
        def breached() -> bool:
            rows = _guard_rows(self.driver.observe(plan), plan.limits, GUARD_DOCS)
            failed = [g for g in rows if not g["ok"]]
            if failed:
                self.state.guards, self._failed_in_move = rows, failed
            return bool(failed)
        return breached

    def _rollback_all(self, reason: str) -> None:
        s = self.state
        self._set_weight(0, "rollback", reason)
        with self.lease.keep():
            self.driver.set_canary(s.the_plan, False)
        self._new_lost()
        s.state, s.step, s.reason, s.paused_from = "rolled_back", 0, reason, None
        self._record("rolled_back", reason)

    def _new_lost(self) -> dict[str, str]:
        """Gateways the driver lost (and drained) that the state does not name yet: named in
        the state (`lost`) and the history (`gateway_lost`)."""
        lost = getattr(self.driver, LOST_ATTR, None)
        if not isinstance(lost, dict):
            return {}
        s = self.state
        new = {str(g): str(why) for g, why in lost.items() if g not in s.lost}
        for g, why in new.items():
            s.lost[g] = why
            self._record("gateway_lost", f"{g}: {why}", gateway=g)
        return new

    def _on_lost(self, cause: str | None = None) -> bool:
        """Name newly lost gateways and, while the migration is active, roll it back over the
        other gateways (True when one was lost). Why a rollback and not a pause:
        docs/migrate.md, "A gateway lost mid-step"."""
        new = self._new_lost()
        if not new:
            return False
        s = self.state
        if s.state in ACTIVE:
            names = "; ".join(f"{g} ({why})" for g, why in new.items())
            self._rollback_all((cause + "; " if cause else "")
                               + f"gateway lost at step {s.step} ({s.weight_new}%): {names}; "
                               f"drained, and the traffic rolled back to the "
                               f"{s.the_plan.source} gateways")
        return True

    def _breach(self, failed: list[dict[str, Any]]) -> None:
        """Roll back to the last good step (or all the way) and say why; a breach the driver
        attributes to one gateway drains that gateway and rolls back (_on_lost)."""
        s = self.state
        why = "; ".join(f"{g['name']} {g['value']:g} > {g['limit']:g}" for g in failed)
        reason = f"guard breached at step {s.step} ({s.weight_new}%): {why}"
        attribute = getattr(self.driver, "attribute", None)
        if s.state != "canary" and attribute is not None:
            with self.lease.keep():
                blamed = attribute(s.the_plan, [g["name"] for g in failed])
                if blamed:
                    self.driver.drain(  # type: ignore[attr-defined]
                        {g: f"the guard breach ({why}) points at it: {w}"
                         for g, w in blamed.items()})
            if self._on_lost(reason):
                return
        if s.state == "canary" or s.last_good == 0:
            self._rollback_all(reason)
            return
        plan = s.the_plan
        self._set_weight(plan.steps[s.last_good - 1], "rollback_step", reason,
                         step=s.last_good)
        if s.state not in ACTIVE:
            return  # a gateway was lost during the step back: rolled back
        s.state, s.paused_from, s.reason, s.since = "paused", "shifting", reason, self.clock()
        self._record("pause", reason)

    # ---- the machine --------------------------------------------------------------------------

    def tick(self) -> State:
        """One round: perform queued operations, read guards, advance when a dwell held."""
        self.acquire()
        self.heartbeat()
        self._take_ops()
        s = self.state
        if s.error or s.state not in ACTIVE:
            return s
        plan = s.the_plan
        check_lost = getattr(self.driver, "check_lost", None)
        if check_lost is not None:
            with self.lease.keep():
                check_lost(plan)
        if self._on_lost():
            return self.state
        with self.lease.keep():
            if s.state == "canary":
                values = self.driver.probe_canary(plan)
            else:
                values = self.driver.observe(plan)
        s.guards = _guard_rows(values, plan.limits,
                               CANARY_DOCS if s.state == "canary" else GUARD_DOCS)
        if s.state != "canary":
            self._keep_baseline(retake=False)
        failed = [g for g in s.guards if not g["ok"]]
        if failed and s.state != "paused":
            self._breach(failed)
            return self.state
        self._save()
        if self.clock() - s.since < (plan.canary_dwell_s if s.state == "canary"
                                     else plan.dwell_s):
            return s
        if s.state == "canary":
            self._keep_baseline(retake=True)
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
        self._set_weight(plan.steps[s.step], "step", step=s.step + 1, state="shifting")

    def _drain_check(self, plan: Plan) -> None:
        s = self.state
        with self.lease.keep():
            now = self.driver.source_packets(plan)
        moved = now - (s.drain_mark or 0)
        if moved > 0:
            s.drain_mark, s.since = now, self.clock()
            self._record("drain_wait", f"{plan.source} gateways forwarded {moved} packets "
                                       "during the dwell")
            return
        with self.lease.keep():
            s.retired = self.driver.retire(plan)
        s.state = "finished"
        self._record("finished", f"retired {', '.join(s.retired)}")

    def _take_ops(self) -> None:
        """Perform the operations queued for this runner, each answered in its document."""
        taken = False
        for doc in op_queue.take(self.store, str(self.lease.owner["nonce"]), self.clock()):
            taken = True
            status, why = op_queue.DONE, None
            try:
                plan = plan_from_json(doc["plan"]) if doc.get("plan") is not None else None
                self.apply(doc["op"], doc.get("reason") or "operator", plan)
            except (MigrationError, PlanError) as exc:
                status, why = op_queue.REFUSED, str(exc)
                self.log(f"{doc['op']} refused: {exc}")
            except BaseException as exc:
                if not isinstance(exc, LeaseError):
                    op_queue.answer(self.store, doc, op_queue.REFUSED,
                                    f"the runner failed performing it: {exc}", self.clock(),
                                    self.state.state)
                raise
            op_queue.answer(self.store, doc, status, why, self.clock(), self.state.state)
        if taken:
            op_queue.prune(self.store)

    def run(self, stop: Callable[[State], bool] | None = None, timeout: float | None = None
            ) -> State:
        """Tick until the migration is final (or `stop` says so, or `timeout` seconds); a
        stored migration that cannot be used is reported once and left alone."""
        stop = stop or (lambda st: st.state in FINAL)
        t0 = self.clock()
        self.acquire()
        try:
            if self.state.error:
                self.log(self.state.error)
            elif self.state.state in ACTIVE:
                self._attach()
            while True:
                st = self.tick()
                if stop(st) or (timeout is not None and self.clock() - t0 > timeout):
                    return st
                self.sleep(self.tick_s)
        finally:
            self.release()
