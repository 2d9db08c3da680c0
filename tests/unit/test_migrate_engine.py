"""The migration state machine over a fake driver and a fake clock: canary, steps, guards,
automatic rollback, operator commands, drain, persistence and resume after a killed runner."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from crosszone.migrate import engine as eng
from crosszone.migrate.plan import Plan, PlanError, load_guards, parse_dwell, parse_steps
from crosszone.store.sqlite_store import SqliteStore


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


class FakeDriver:
    """Records what the engine asked for; guard values are set by the test."""

    def __init__(self) -> None:
        self.problems: list[str] = []
        self.canary_on = False
        self.weight = 0
        self.weights: list[int] = []
        self.values: dict[str, float] = {"errors": 0, "drops": 0, "sessions_down": 0}
        self.canary_values = {"canary_errors": 0.0, "canary_latency_factor": 1.2}
        self.bad_from_weight: int | None = None  # errors appear at or above this weight
        self.packets = 0
        self.packets_per_read = 0
        self.retired: list[str] = []

    def parity(self, plan: Plan) -> list[str]:
        return list(self.problems)

    def set_canary(self, plan: Plan, on: bool) -> None:
        self.canary_on = on

    def probe_canary(self, plan: Plan) -> dict[str, float]:
        return dict(self.canary_values)

    def set_weight(self, plan: Plan, weight_new: int) -> float:
        self.weight = weight_new
        self.weights.append(weight_new)
        return 12.5

    def observe(self, plan: Plan) -> dict[str, float]:
        v = dict(self.values)
        if self.bad_from_weight is not None and self.weight >= self.bad_from_weight:
            v["errors"] = 7
        return v

    def source_packets(self, plan: Plan) -> int:
        self.packets += self.packets_per_read
        return self.packets

    def retire(self, plan: Plan) -> list[str]:
        self.retired = ["lgw1", "lgw2"]
        return self.retired


PLAN = Plan(canary="b", steps=(10, 50, 100), dwell_s=5, canary_dwell_s=3)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[SqliteStore, FakeDriver, Clock]:
    return SqliteStore(str(tmp_path / "s.db"), poll_s=0.001), FakeDriver(), Clock()


def _engine(store: SqliteStore, drv: FakeDriver, clock: Clock) -> eng.Engine:
    return eng.Engine(store, drv, clock=clock, sleep=clock.sleep, tick_s=1.0)


def test_full_migration_walks_every_step_then_waits_for_finish(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    e.start(PLAN)
    assert drv.canary_on and eng.read_state(store).state == "canary"
    st = e.run(stop=lambda s: s.state == "shifted", timeout=100)
    assert st.state == "shifted" and st.weight_new == 100 and st.step == 3
    assert drv.weights == [10, 50, 100]
    events = [h["event"] for h in eng.read_state(store).history]
    assert events[:3] == ["start", "canary_on", "canary_ok"]  # the runner that started: no attach
    assert events.count("step") == 3 and events.count("step_ok") == 3
    # each step dwelt at least the plan's dwell
    steps = [h["t"] for h in st.history if h["event"] == "step"]
    assert all(b - a >= 5 for a, b in itertools.pairwise(steps))
    # finish: drain dwell with the legacy counter standing still, then retire
    e.apply("finish")
    st = e.run(timeout=100)
    assert st.state == "finished" and st.retired == ["lgw1", "lgw2"]
    doc = eng.status(store)
    assert {"state", "step", "weight_new", "history", "guards"} <= set(doc)
    assert all({"t", "event", "step", "weight_new", "reason"} <= set(h) for h in doc["history"])
    assert all({"name", "value", "limit", "ok"} <= set(g) for g in doc["guards"])


def test_finish_waits_while_the_old_gateways_still_forward(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    e.start(PLAN)
    e.run(stop=lambda s: s.state == "shifted", timeout=100)
    drv.packets_per_read = 5
    e.apply("finish")
    st = e.run(timeout=30)
    assert st.state == "draining" and not drv.retired
    assert any(h["event"] == "drain_wait" for h in st.history)
    drv.packets_per_read = 0
    assert e.run(timeout=30).state == "finished"


def test_parity_failure_refuses_and_writes_nothing(setup) -> None:
    store, drv, clock = setup
    drv.problems = ["xgw1: maps differ from intent revision 3 (routes4: 2 entries)",
                    "xgw2: BGP session with 10.10.4.1 is Idle"]
    e = _engine(store, drv, clock)
    with pytest.raises(eng.Refused, match="xgw2: BGP session"):
        e.start(PLAN)
    assert not drv.canary_on and drv.weights == []
    st = eng.read_state(store)  # the state stays 'none', and says why the start was refused
    assert st.state == "none" and "xgw2: BGP session with 10.10.4.1 is Idle" in (st.reason or "")
    assert [h["event"] for h in st.history] == ["start_refused"]


def test_guard_breach_rolls_back_to_last_good_step_and_says_why(setup) -> None:
    store, drv, clock = setup
    drv.bad_from_weight = 50
    e = _engine(store, drv, clock)
    e.start(PLAN)
    st = e.run(stop=lambda s: s.state == "paused", timeout=100)
    assert st.state == "paused" and st.step == 1 and st.weight_new == 10
    assert drv.weights == [10, 50, 10]
    assert "errors 7 > 0" in (st.reason or "") and "step 2 (50%)" in (st.reason or "")
    rb = [h for h in st.history if h["event"] == "rollback_step"]
    assert rb and rb[0]["converge_ms"] == 12.5


def test_breach_at_the_first_step_rolls_back_everything(setup) -> None:
    store, drv, clock = setup
    drv.bad_from_weight = 10
    e = _engine(store, drv, clock)
    e.start(PLAN)
    st = e.run(timeout=100)
    assert st.state == "rolled_back" and drv.weight == 0 and not drv.canary_on


def test_canary_failure_rolls_back_before_any_production_traffic_moves(setup) -> None:
    store, drv, clock = setup
    drv.canary_values = {"canary_errors": 3, "canary_latency_factor": 1.0}
    e = _engine(store, drv, clock)
    e.start(PLAN)
    st = e.run(timeout=100)
    assert st.state == "rolled_back" and "canary_errors 3 > 0" in (st.reason or "")
    assert drv.weights == [0] and not drv.canary_on


def test_commands_pause_resume_rollback_through_the_store(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    e.start(PLAN)
    e.run(stop=lambda s: s.state == "shifting", timeout=100)
    e.acquire()  # a runner is alive: operations are queued for it
    op = eng.submit(store, "pause", clock)
    st = e.run(stop=lambda s: s.state == "paused", timeout=5)
    assert st.state == "paused"
    assert eng.op_queue.read(store, op["id"], clock())["status"] == "done"
    e.acquire()
    held = st.step
    clock.t += 100  # a long pause moves nothing
    e.tick()
    assert e.state.state == "paused" and e.state.step == held
    eng.submit(store, "resume", clock)
    st = e.run(stop=lambda s: s.state == "shifting", timeout=5)
    assert st.state == "shifting"
    e.acquire()
    eng.submit(store, "rollback", clock)
    st = e.run(timeout=5)
    assert st.state == "rolled_back" and drv.weight == 0


def test_operations_that_do_not_apply_are_refused_with_the_state(setup) -> None:
    store, drv, clock = setup
    with pytest.raises(eng.MigrationError, match="cannot finish a migration in state 'none'"):
        eng.submit(store, "finish", clock)
    e = _engine(store, drv, clock)
    e.start(PLAN)
    with pytest.raises(eng.MigrationError, match="already under way"):
        eng.submit(store, "start", clock, plan=PLAN)
    with pytest.raises(eng.MigrationError, match="unknown operation"):
        eng.submit(store, "jump", clock)


def test_a_killed_runner_resumes_at_its_step_and_reasserts_the_weight(setup) -> None:
    store, drv, clock = setup
    e = _engine(store, drv, clock)
    e.start(PLAN)
    e.run(stop=lambda s: s.state == "shifting" and s.step == 2, timeout=100)
    # kill -9: the engine object is gone, its lease stays behind until it expires
    e.acquire()
    assert eng.runner_alive(store, clock())
    clock.t += eng.RUNNER_TIMEOUT_S + 1
    assert not eng.runner_alive(store, clock())
    drv2 = FakeDriver()
    e2 = _engine(store, drv2, clock)
    assert e2.state.step == 2 and e2.state.weight_new == 50
    st = e2.run(stop=lambda s: s.state == "shifted", timeout=100)
    assert drv2.weights == [50, 100]  # re-asserted 50, then moved on; never restarted at 10
    assert st.state == "shifted"
    assert any(h["event"] == "runner_attached" for h in st.history)


def test_the_plan_persists_with_the_state(setup) -> None:
    store, drv, clock = setup
    _engine(store, drv, clock).start(PLAN)
    assert eng.read_state(store).the_plan == PLAN
    assert json.loads(store.get(eng.KEY) or b"{}")["plan"]["steps"] == [10, 50, 100]


def test_plan_arguments_are_validated(tmp_path: Path) -> None:
    assert parse_steps("1,10,25,50,100") == (1, 10, 25, 50, 100)
    for bad in ("10,5,100", "1,10", "0,100", "a,100", ""):
        with pytest.raises(PlanError):
            parse_steps(bad)
    assert parse_dwell("30s") == 30 and parse_dwell("500ms") == 0.5 and parse_dwell("2m") == 120
    with pytest.raises(PlanError):
        parse_dwell("soon")
    f = tmp_path / "g.yaml"
    f.write_text("errors: 2\nsmall_p99_factor: 4\n")
    assert load_guards(f)["errors"] == 2 and load_guards(f)["drops"] == 0
    f.write_text("errrors: 2\n")
    with pytest.raises(PlanError, match="unknown guard 'errrors'"):
        load_guards(f)
    f.write_text("errors: -1\n")
    with pytest.raises(PlanError, match="a number >= 0"):
        load_guards(f)
    phases = Plan(steps=(50, 100)).describe()
    assert [p["phase"] for p in phases] == ["parity", "canary", "shift", "shift", "finish"]
