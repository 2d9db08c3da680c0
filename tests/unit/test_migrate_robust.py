"""The migration engine against what goes wrong around it (issue 25, points 3, 4 and 6 to 10):
poisoned plans and states in the store, operations queued and answered, two runners, the lease,
compare-and-swap writes, a bounded history written only on change, and a resumed runner that
keeps the dwell and the latency baseline of the step it took over."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from crosszone.migrate import engine as eng
from crosszone.migrate import lease as leases
from crosszone.migrate import op_queue
from crosszone.migrate.plan import Plan, PlanError
from crosszone.migrate.plan_schema import plan_from_bytes, plan_from_json
from crosszone.store.sqlite_store import SqliteStore
from unit.test_migrate_engine import PLAN, Clock, FakeDriver

#: Plans the schema refuses, each with the field its message names (issue 25, point 6).
BAD_PLANS: list[tuple[dict[str, Any], str]] = [
    ({"steps": []}, "plan.steps"),
    ({"steps": [150]}, "plan.steps"),
    ({"steps": [-5, 100]}, "plan.steps"),
    ({"steps": [100, 10]}, "plan.steps"),
    ({"steps": ["x", 100]}, "plan.steps.0"),
    ({"steps": "abc"}, "plan.steps"),
    ({"steps": [50]}, "plan.steps"),
    ({"steps": [10, 10, 100]}, "plan.steps"),
    ({"dwell_s": -30}, "plan.dwell_s"),
    ({"dwell_s": "x"}, "plan.dwell_s"),
    ({"dwell_s": float("nan")}, "plan.dwell_s"),
    ({"dwell_s": float("inf")}, "plan.dwell_s"),
    ({"canary_dwell_s": True}, "plan.canary_dwell_s"),
    ({"limits": {}}, "plan.limits"),
    ({"limits": {**PLAN.limits, "errors": -1}}, "plan.limits.errors"),
    ({"limits": {**PLAN.limits, "errors": "x"}}, "plan.limits.errors"),
    ({"limits": {**PLAN.limits, "errors": float("nan")}}, "plan.limits.errors"),
    ({"limits": {**PLAN.limits, "speed": 1}}, "plan.limits"),
    ({"source": ""}, "plan.source"),
    ({"teleport": True}, "plan.teleport"),
]


class BaselineDriver(FakeDriver):
    """Takes its latency baseline as the product's driver does: during the canary, kept in
    memory, and divides the guard reads' p99 by it."""

    def __init__(self) -> None:
        super().__init__()
        self.baseline_p99_ms: float | None = None
        self.p99_ms = 40.0

    def probe_canary(self, plan: Plan) -> dict[str, float]:
        self.baseline_p99_ms = self.p99_ms
        return super().probe_canary(plan)

    def observe(self, plan: Plan) -> dict[str, float]:
        if self.baseline_p99_ms is None:
            self.baseline_p99_ms = self.p99_ms  # a fresh driver re-takes it: the bug
        return {**super().observe(plan),
                "small_p99_factor": self.p99_ms / self.baseline_p99_ms}


class CountingStore(SqliteStore):
    """Counts writes per key."""

    def __init__(self, path: str) -> None:
        super().__init__(path, poll_s=0.001)
        self.writes: dict[str, int] = {}

    def put_many(self, items: Any) -> int:
        for k in items:
            self.writes[k] = self.writes.get(k, 0) + 1
        return super().put_many(items)

    def put_if(self, key: str, value: bytes | None, revision: int) -> int | None:
        self.writes[key] = self.writes.get(key, 0) + 1
        return super().put_if(key, value, revision)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[SqliteStore, FakeDriver, Clock]:
    return SqliteStore(str(tmp_path / "s.db"), poll_s=0.001), FakeDriver(), Clock()


def _engine(store: SqliteStore, drv: FakeDriver, clock: Clock, **kw: Any) -> eng.Engine:
    return eng.Engine(store, drv, clock=clock, sleep=clock.sleep, tick_s=1.0, **kw)


def _to_step(e: eng.Engine, step: int) -> eng.State:
    e.start(PLAN)
    return e.run(stop=lambda s: s.state == "shifting" and s.step == step, timeout=100)


# ---- point 6: one plan schema -----------------------------------------------------------------

@pytest.mark.parametrize("change, field", BAD_PLANS)
def test_the_plan_schema_refuses_each_bad_plan_naming_the_field(change: dict[str, Any],
                                                                field: str) -> None:
    doc = {**PLAN.to_json(), **change}
    with pytest.raises(PlanError, match=rf"^{field.replace('.', '[.]')}\b"):
        plan_from_json(doc)
    body = json.dumps(doc).encode()  # NaN and Infinity as Python's json writes them
    with pytest.raises(PlanError, match=field.split(".")[1]):
        plan_from_bytes(body)


def test_the_schema_takes_good_plans_and_defaults() -> None:
    assert plan_from_json(PLAN.to_json()) == PLAN
    assert plan_from_bytes(b"") == Plan() and plan_from_bytes(b"{}") == Plan()
    with pytest.raises(PlanError, match="not a JSON object"):
        plan_from_bytes(b"[" * 100_000)
    with pytest.raises(PlanError, match="a JSON object"):
        plan_from_json([10, 100])


def test_a_bad_plan_given_to_the_engine_is_refused_and_the_reason_kept(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    bad = Plan(steps=(10, 50), dwell_s=1)  # does not end at 100
    with pytest.raises(eng.Refused, match="the last step must be 100"):
        e.start(bad)
    st = eng.read_state(store)
    assert st.state == "none" and "the last step must be 100" in (st.reason or "")
    assert not drv.canary_on and drv.weights == []


# ---- point 7: a poisoned stored plan or state -------------------------------------------------

def _poisoned(change: dict[str, Any]) -> bytes:
    st = eng.State(state="shifting", step=1, weight_new=10, plan=PLAN.to_json(), since=990)
    doc = st.to_json()
    for k, v in change.items():
        if k.startswith("plan."):
            doc["plan"][k[5:]] = v
        else:
            doc[k] = v
    return json.dumps(doc).encode()


POISONED = [
    _poisoned({"plan.dwell_s": "x"}),
    _poisoned({"plan.steps": ["x", 100]}),
    _poisoned({"plan.limits": {}}),
    _poisoned({"plan.dwell_s": float("nan")}),
    _poisoned({"plan": None}),
    _poisoned({"step": "x"}),
    _poisoned({"history": [1]}),
    _poisoned({"guards": [{"name": "errors"}]}),
    b"[]",
    b"[" * 100_000,
    b"not json",
    b'"shifting"',
]


@pytest.mark.parametrize("raw", POISONED, ids=range(len(POISONED)))
def test_a_poisoned_stored_migration_is_reported_and_no_runner_fails_on_it(setup, raw: bytes
                                                                           ) -> None:
    store, drv, clock = setup
    store.put(eng.KEY, raw)
    st = eng.read_state(store)
    assert st.error and ("unreadable" in st.error or "cannot be used" in st.error
                         or "no plan" in st.error)
    doc = eng.status(store)
    assert doc["error"] == st.error and json.dumps(doc)  # a status document, serialisable
    lines: list[str] = []
    e = _engine(store, drv, clock, log=lines.append)
    for op in ("resume", "pause", "rollback", "finish"):
        with pytest.raises(eng.MigrationError, match="cannot " + op):
            e.apply(op)
    e.run(timeout=3)  # a runner (the first, and each resumed one) ticks without failing
    e2 = _engine(store, FakeDriver(), clock)
    e2.run(timeout=3)
    assert drv.weights == [] and not drv.canary_on  # nothing acted on it
    assert st.error in lines  # said once, in one line
    assert store.get(eng.KEY) == raw  # and nothing overwrote it


def test_a_start_whose_queued_plan_was_poisoned_is_refused_naming_the_field(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    e.acquire()  # `crosszone migrate run`
    op = eng.submit(store, "start", clock, plan=PLAN)
    key = op_queue.OP_PREFIX + op["id"]
    doc = json.loads(store.get(key) or b"{}")
    doc["plan"]["dwell_s"] = "x"  # written straight into the store
    store.put(key, json.dumps(doc).encode())
    e.tick()
    got = op_queue.read(store, op["id"], clock())
    assert got is not None and got["status"] == "refused"
    assert got["why"].startswith("plan.dwell_s: Input should be a valid number")
    assert not drv.canary_on and eng.read_state(store).state == "none"


# ---- point 8: a queue of operations, each answered --------------------------------------------

def test_two_operations_are_both_kept_and_answered_in_order(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    _to_step(e, 1)
    e.acquire()
    first = eng.submit(store, "rollback", clock)
    second = eng.submit(store, "resume", clock)  # once a single key: it replaced the rollback
    e.tick()
    a = op_queue.read(store, first["id"], clock())
    b = op_queue.read(store, second["id"], clock())
    assert a is not None and b is not None
    assert a["status"] == "done" and a["state"] == "rolled_back"
    assert b["status"] == "refused"
    assert "cannot resume a migration in state 'rolled_back'" in b["why"]
    assert e.state.state == "rolled_back" and drv.weight == 0
    assert [o["id"] for o in eng.status(store)["ops"]] == [first["id"], second["id"]]


def test_an_operation_queued_while_no_runner_is_alive_expires_instead(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    _to_step(e, 1)  # run() returned: no runner holds the lease now
    assert not eng.runner_alive(store, clock())
    op = eng.submit(store, "rollback", clock)
    assert op["runner"] is None
    clock.t += 2  # later, a runner comes, in a state the operator did not see
    e2 = _engine(store, FakeDriver(), clock)
    e2.tick()
    got = op_queue.read(store, op["id"], clock())
    assert got is not None and got["status"] == "expired"
    assert got["why"] == "queued while no runner was alive"
    assert e2.state.state == "shifting"


def test_an_operation_for_a_dead_runner_or_past_its_expiry_is_not_performed(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    _to_step(e, 1)
    e.acquire()
    for_dead = eng.submit(store, "pause", clock)
    clock.t += eng.RUNNER_TIMEOUT_S + 1  # the runner was killed: its lease expired
    e2 = _engine(store, FakeDriver(), clock)
    e2.tick()
    a = op_queue.read(store, for_dead["id"], clock())
    late = eng.submit(store, "pause", clock)  # for e2, which does not tick in time
    clock.t += op_queue.OP_TTL_S + 1
    e2.lease.renew(force=True)
    e2.tick()
    b = op_queue.read(store, late["id"], clock())
    assert a is not None and a["status"] == "expired" and "which is gone" in a["why"]
    assert b is not None and b["status"] == "expired" and "expired" in b["why"]
    assert e2.state.state == "shifting"


def test_a_withdrawn_operation_is_not_taken_and_a_taken_one_cannot_be_withdrawn(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    _to_step(e, 1)
    e.acquire()
    op = eng.submit(store, "pause", clock)
    assert op_queue.withdraw(store, op["id"], clock(), "its runner stopped")
    e.tick()
    assert e.state.state == "shifting"
    op2 = eng.submit(store, "pause", clock)
    e.tick()
    assert e.state.state == "paused"
    assert not op_queue.withdraw(store, op2["id"], clock(), "too late")
    got = op_queue.read(store, op2["id"], clock())
    assert got is not None and got["status"] == "done"


def test_answered_operations_are_pruned_and_hostile_ones_refused(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    _to_step(e, 1)
    e.acquire()
    store.put(op_queue.OP_PREFIX + "00000000000000000-bad", b"[" * 100_000)
    for _ in range(op_queue.KEEP_ANSWERED + 5):
        eng.submit(store, "pause", clock)
        e.tick()
        eng.submit(store, "resume", clock)
        e.tick()
    items, _ = store.get_prefix(op_queue.OP_PREFIX)
    assert len(items) == op_queue.KEEP_ANSWERED
    assert e.state.state == "shifting"


# ---- point 9: two starts, two runners, the lease, compare-and-swap ----------------------------

def test_two_starts_on_one_store_exactly_one_wins(setup) -> None:
    store, drv, clock = setup
    drv2 = FakeDriver()
    e1, e2 = _engine(store, drv, clock), _engine(store, drv2, clock)
    e1.start(PLAN)
    with pytest.raises(leases.RunnerBusy, match=r"another runner holds the migration: pid \d+"):
        e2.start(PLAN)
    assert drv.canary_on and not drv2.canary_on
    assert [h["event"] for h in eng.read_state(store).history] == ["start", "canary_on"]


def test_of_two_starts_queued_at_once_exactly_one_is_taken(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    e.acquire()  # `crosszone migrate run`, waiting for operations
    a = eng.submit(store, "start", clock, plan=PLAN)
    with pytest.raises(eng.MigrationError, match=f"another start is queued already "
                                                 f"[(]operation {a['id']}, queued[)]"):
        eng.submit(store, "start", clock, plan=Plan(steps=(100,)))
    e.tick()
    got = op_queue.read(store, a["id"], clock())
    assert got is not None and got["status"] == "done"
    assert eng.read_state(store).the_plan == PLAN
    ops = eng.status(store)["ops"]
    assert [o["status"] for o in ops] == ["done", "expired"]  # the loser, withdrawn


def test_a_start_after_a_refused_one_can_be_queued(setup) -> None:
    store, drv, clock = setup
    drv.problems = ["xgw1: BGP session with 10.10.4.1 is Idle"]
    e = _engine(store, drv, clock)
    e.acquire()
    first = eng.submit(store, "start", clock, plan=PLAN)
    e.tick()
    assert (op_queue.read(store, first["id"], clock()) or {})["status"] == "refused"
    drv.problems = []
    again = eng.submit(store, "start", clock, plan=PLAN)  # the pending start was answered
    e.tick()
    assert (op_queue.read(store, again["id"], clock()) or {})["status"] == "done"
    assert e.state.state == "canary"


def test_a_start_left_running_by_a_dead_runner_does_not_block_the_next(setup) -> None:
    store, _drv, clock = setup
    e = _engine(store, FakeDriver(), clock)
    e.acquire()
    first = eng.submit(store, "start", clock, plan=PLAN)
    taken = next(op_queue.take(store, str(e.lease.owner["nonce"]), clock()))
    assert taken["id"] == first["id"]  # taken; then kill -9 before it was answered
    with pytest.raises(eng.MigrationError, match="running"):
        eng.submit(store, "start", clock, plan=PLAN)  # while that runner lives
    clock.t += eng.RUNNER_TIMEOUT_S + 1
    e2 = _engine(store, FakeDriver(), clock)
    e2.acquire()
    op = eng.submit(store, "start", clock, plan=PLAN)
    e2.tick()
    assert (op_queue.read(store, op["id"], clock()) or {})["status"] == "done"


def test_a_writer_that_lost_the_state_cannot_overwrite_it(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    _to_step(e, 1)
    e.acquire()
    other = eng.State(state="rolled_back", plan=PLAN.to_json(), reason="another writer")
    store.put(eng.KEY, json.dumps(other.to_json()).encode())
    with pytest.raises(eng.Superseded, match="changed by another writer"):
        e.apply("pause")
    assert eng.read_state(store).state == "rolled_back"


def test_the_lease_is_taken_over_only_once_expired_and_released_only_by_its_owner(setup
                                                                                  ) -> None:
    store, _drv, clock = setup
    a, b = leases.Lease(store, clock), leases.Lease(store, clock)
    a.acquire()
    with pytest.raises(leases.RunnerBusy) as busy:
        b.acquire()
    assert str(a.owner["nonce"]) in str(busy.value) and str(a.owner["host"]) in str(busy.value)
    clock.t += leases.LEASE_TTL_S - 1
    a.renew()  # renewed: still a's
    clock.t += leases.LEASE_TTL_S - 1
    with pytest.raises(leases.RunnerBusy):
        b.acquire()
    clock.t += leases.LEASE_TTL_S + 1  # a stopped renewing (killed)
    b.acquire()
    with pytest.raises(leases.LeaseLost, match="taken over"):
        a.renew(force=True)  # a, back from a long stall, finds out and stops
    a.release()  # a's exit does not delete b's lease
    info = leases.alive(store, clock())
    assert info is not None and info["owner"] == b.owner
    b.release()
    assert store.get(leases.RUNNER) is None


def test_the_lease_is_renewed_during_a_long_move(setup) -> None:
    store, _drv, clock = setup

    class SlowDriver(FakeDriver):
        """A move of 8 s (the product's driver waiting for agents), renewed from a thread."""

        def __init__(self, lease: leases.Lease) -> None:
            super().__init__()
            self.lease = lease
            self.busy: str | None = None

        def set_weight(self, plan: Plan, weight_new: int) -> float:
            for _ in range(8):
                clock.t += 1.0
                before = self.lease.written
                done = threading.Event()
                for _ in range(500):  # wait for the thread's renewal (a bounded loop)
                    if self.lease.written != before:
                        done.set()
                        break
                    threading.Event().wait(0.01)
                assert done.is_set()
            try:
                leases.Lease(store, clock).acquire()
            except leases.RunnerBusy as exc:
                self.busy = str(exc)
            return super().set_weight(plan, weight_new)

    lease = leases.Lease(store, clock, renew_every=0.01)
    drv = SlowDriver(lease)
    e = _engine(store, drv, clock, lease=lease)
    e.start(PLAN)
    e.run(stop=lambda s: s.state == "shifting", timeout=100)
    assert drv.busy is not None and "another runner holds the migration" in drv.busy


def test_a_kill_mid_move_is_recorded_and_the_routing_put_back(setup) -> None:
    store, drv, clock = setup

    class Killed(Exception):
        pass

    class DiesInMove(FakeDriver):
        def set_weight(self, plan: Plan, weight_new: int) -> float:
            super().set_weight(plan, weight_new)
            if weight_new == 50:
                raise Killed  # the routing moved; the runner died before it wrote so
            return 12.5

    e = _engine(store, DiesInMove(), clock)
    e.start(PLAN)
    with pytest.raises(Killed):
        e.run(timeout=100)
    st = eng.read_state(store)
    assert (st.step, st.weight_new, st.moving_to) == (1, 10, 50)
    clock.t += eng.RUNNER_TIMEOUT_S + 1
    e2 = _engine(store, drv, clock)
    st = e2.run(stop=lambda s: s.state == "shifting" and s.step == 2, timeout=100)
    assert drv.weights[0] == 10  # routing put back where the store says it is
    moved = [h for h in st.history if h["event"] == "move_interrupted"]
    assert moved and "from 10% to 50%" in moved[0]["reason"] and st.moving_to is None


# ---- point 10: reasons kept, bounded history, written on change -------------------------------

def test_a_refused_start_from_the_queue_records_why(setup) -> None:
    store, drv, clock = setup
    drv.problems = ["a migration runs between crosszone and another kind, not nope -> crosszone"]
    e = _engine(store, drv, clock)
    e.acquire()
    op = eng.submit(store, "start", clock, plan=Plan(source="nope"))
    e.tick()
    got = op_queue.read(store, op["id"], clock())
    assert got is not None and got["status"] == "refused" and "nope" in got["why"]
    st = eng.read_state(store)
    assert st.state == "none" and "nope -> crosszone" in (st.reason or "")


def test_the_history_is_capped_and_older_entries_summarised(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    _to_step(e, 1)
    for _ in range(80):
        e.apply("pause")
        e.apply("resume")
    h = eng.read_state(store).history
    assert len(h) == eng.HISTORY_KEEP
    # start, canary_on, canary_ok, step; each pause and resume; the lease taken again after
    # run() returned: runner_attached once
    written = 4 + 160 + 1
    assert h[0]["event"] == "summary" and h[0]["folded"] == written - (eng.HISTORY_KEEP - 1)
    assert h[0]["events"]["start"] == 1 and "older entries folded" in h[0]["reason"]
    assert {"t", "event", "step", "weight_new", "reason"} <= set(h[0])
    assert h[-1]["event"] == "resume"


def test_idle_ticks_write_nothing_to_the_state(tmp_path: Path) -> None:
    store, drv, clock = CountingStore(str(tmp_path / "c.db")), FakeDriver(), Clock()
    e = eng.Engine(store, drv, clock=clock, sleep=clock.sleep, tick_s=0.5)
    e.start(PLAN)
    e.run(stop=lambda s: s.state == "shifted", timeout=100)
    e.acquire()
    e.tick()
    before = dict(store.writes)
    for _ in range(40):  # 20 s held at 100 %, guards steady
        clock.t += 0.5
        e.tick()
    assert store.writes.get(eng.KEY, 0) == before.get(eng.KEY, 0)
    renewals = store.writes.get(leases.RUNNER, 0) - before.get(leases.RUNNER, 0)
    assert 0 < renewals <= 20 / leases.RENEW_EVERY_S + 1  # the lease, not every tick
    drv.values["small_p99_factor"] = 1.5  # a guard read for the first time: written at once
    clock.t += 0.5
    e.tick()
    assert store.writes[eng.KEY] == before.get(eng.KEY, 0) + 1
    drv.values["small_p99_factor"] = 1.6  # only a value moved: not every tick
    for _ in range(4):
        clock.t += 0.5
        e.tick()
    assert store.writes[eng.KEY] == before.get(eng.KEY, 0) + 1
    clock.t += eng.GUARDS_SAVE_S
    e.tick()
    assert store.writes[eng.KEY] == before.get(eng.KEY, 0) + 2
    assert eng.read_state(store).guards[1]["value"] == 1.6


# ---- points 3 and 4: a resumed runner keeps the step's dwell and the baseline -----------------

def test_a_resumed_runner_continues_the_dwell_from_when_the_step_began(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    st = _to_step(e, 2)
    began = st.since
    e.acquire()  # killed while it held the lease
    clock.t = began + 3  # 3 s of the 5 s dwell had passed
    clock.t += eng.RUNNER_TIMEOUT_S + 1
    e2 = _engine(store, FakeDriver(), clock)
    e2.apply("resume")  # what `crosszone migrate resume` does once the lease expired
    assert e2.state.since == began
    e2.tick()  # the dwell (5 s) had already passed since the step began: the next step
    assert e2.state.step == 3


def test_the_latency_baseline_is_stored_before_the_first_step_and_reused(setup) -> None:
    store, _drv, clock = setup
    drv = BaselineDriver()
    drv.p99_ms = 40.0
    e = _engine(store, drv, clock)
    _to_step(e, 1)
    assert eng.read_state(store).baselines == {"small_p99_ms": 40.0}
    first = next(h for h in eng.read_state(store).history if h["event"] == "step")
    assert first["t"] >= 0  # stored before the first step: the canary's
    e.acquire()
    clock.t += eng.RUNNER_TIMEOUT_S + 1  # kill -9 mid-migration, latency now higher
    drv2 = BaselineDriver()
    drv2.p99_ms = 100.0  # 2.5 x the baseline: holds (limit 3); re-taken it would read 1.0
    e2 = _engine(store, drv2, clock)
    e2.run(stop=lambda s: s.state == "shifting" and s.step == 2, timeout=100)
    assert drv2.baseline_p99_ms == 40.0
    factors = [g["value"] for g in e2.state.guards if g["name"] == "small_p99_factor"]
    assert factors == [2.5]
    drv2.p99_ms = 130.0  # 3.25 x the stored baseline: a breach, as before the kill
    st = e2.run(stop=lambda s: s.state in ("paused", "rolled_back"), timeout=100)
    assert "small_p99_factor 3.25 > 3" in (st.reason or "")
