"""A crosszone gateway lost mid-migration (issue 25, point 2), and a guard breach attributed to
one gateway (point 1), against the fake deployment (fake_agents.py), injected time.

Lost: its agent reports failed-closed, or it gives no sign of life (no status, no metrics) for
the plan's agent_lost_s, or it does not apply a move within apply_timeout_s. The driver drains
it (its routing object withdraws it, nobody waits for it), the engine names it in the state
and rolls the migration back over the other gateways, and the runner ends normally: `migrate
start` exits 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crosszone.migrate import commands
from crosszone.migrate import engine as eng
from crosszone.migrate.agent_driver import AgentDriver, DriverError
from crosszone.migrate.lost_gateways import attribute, failed_closed
from crosszone.migrate.plan import Plan
from crosszone.migrate.plan_schema import PlanError, plan_from_json
from crosszone.store import routing
from crosszone.store.sqlite_store import SqliteStore
from unit.fake_agents import AGENTS, CANARY, LEGACY, World, make_driver

PLAN = Plan(canary=CANARY, steps=(10, 50, 100), dwell_s=2.0, canary_dwell_s=2.0)
#: a dead agent is unhealthy (agents_unhealthy), which breaches a default plan's guards at
#: once while it is read: these plans allow it, so that only the agent's silence can tell
TOLERANT = Plan(canary=CANARY, steps=(10, 50, 100), dwell_s=2.0, canary_dwell_s=2.0,
                limits={**PLAN.limits, "agents_unhealthy": 1.0})
HELD = ("shifted", "paused")


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(SqliteStore(str(tmp_path / "s.db")))


def _engine(world: World, drv: AgentDriver) -> eng.Engine:
    e = eng.Engine(world.store, drv, clock=world.now, sleep=world.sleep, tick_s=0.5)
    drv.beat = e.heartbeat
    return e


def _when(world: World, e: eng.Engine, cond: Callable[[], bool],
          act: Callable[[], None]) -> None:
    """Do `act` once, at the first sleep of the driver or the engine at which `cond` holds."""
    real = world.sleep
    done: list[bool] = []

    def sleep(s: float) -> None:
        real(s)
        if not done and cond():
            done.append(True)
            act()
    world.sleep = sleep  # type: ignore[method-assign]
    e.sleep = sleep
    e.driver.sleep = sleep  # type: ignore[attr-defined]


def _run(e: eng.Engine) -> eng.State:
    return e.run(stop=lambda s: s.state in eng.FINAL or s.state in HELD)


def _legacy_carries_everything(world: World) -> None:
    assert set(world.shares()) == set(LEGACY), world.shares()


# ---- lost mid-step ----------------------------------------------------------------------------

def test_a_failed_closed_agent_mid_step_is_drained_and_the_migration_rolls_back(
        world: World) -> None:
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(PLAN)
    _when(world, e, lambda: e.state.moving_to == 50,
          lambda: world.failed_closed.update(xgw2="eth1"))
    st = _run(e)  # returns: no exception
    assert st.state == "rolled_back", st.reason
    assert list(st.lost) == ["xgw2"] and "failed-closed" in st.lost["xgw2"] \
        and "eth1" in st.lost["xgw2"]
    assert "xgw2" in (st.reason or "") and "gateway lost at step" in (st.reason or "")
    lost = [h for h in st.history if h["event"] == "gateway_lost"]
    assert [h["gateway"] for h in lost] == ["xgw2"]
    objs = routing.read_all(world.store)
    assert objs["xgw2"].withdraw and objs["xgw2"].by == "migration: lost"
    _legacy_carries_everything(world)
    # what `migrate status --json` and GET /v1/migration print
    doc = eng.status(world.store, now=world.t)
    assert doc["lost"] == st.lost and doc["state"] == "rolled_back"


def test_a_silent_gateway_mid_step_is_lost_after_agent_lost_s(world: World) -> None:
    # killed (agent and metrics gone) as the 50 % step begins: its move waits for the agent
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(TOLERANT)
    killed: list[float] = []

    def kill() -> None:
        world.killed.add("xgw2")
        killed.append(world.t)
    _when(world, e, lambda: e.state.moving_to == 50, kill)
    st = _run(e)
    assert st.state == "rolled_back", st.reason
    assert list(st.lost) == ["xgw2"] and "no sign of life" in st.lost["xgw2"]
    entry = next(h for h in st.history if h["event"] == "gateway_lost")
    assert TOLERANT.agent_lost_s <= entry["t"] - killed[0] < TOLERANT.agent_lost_s + 3
    # the rollback waited only for the live gateway: xgw2 never applied anything since
    objs = routing.read_all(world.store)
    assert objs["xgw2"].withdraw and world.applied["xgw1"] == objs["xgw1"]
    assert world.applied["xgw2"] != objs["xgw2"]
    # (a gateway whose bgpd outlived its agent still announces its last step: its restarted
    # agent reads the object that withdraws it)
    world.killed.discard("xgw2")
    world.advance(1.0)
    _legacy_carries_everything(world)


def test_a_brief_agent_gap_holds_the_step_and_the_migration_goes_on(world: World) -> None:
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(TOLERANT)
    back_at: list[float] = []

    def kill() -> None:
        world.killed.add("xgw2")
        back_at.append(world.t + PLAN.agent_lost_s / 2)

    def restarted() -> bool:  # never true: only the agent's restart, at every sleep
        if back_at and world.t >= back_at[0]:
            world.killed.discard("xgw2")
        return False
    # killed during the 10 % step's dwell: the 50 % step's move waits for it
    _when(world, e, lambda: e.state.state == "shifting" and e.state.weight_new == 10
          and e.state.moving_to is None, kill)
    _when(world, e, restarted, lambda: None)
    st = _run(e)
    assert st.state == "shifted", st.reason
    assert st.lost == {} and drv.lost == {}
    step50 = next(h for h in st.history if h["event"] == "step" and h["weight_new"] == 50)
    assert step50["applied_ms"] >= 5000  # it held for the agent


def test_a_gateway_lost_while_dwelling_is_found_by_the_guards_tick(world: World) -> None:
    plan = Plan(canary=CANARY, steps=(10, 50, 100), dwell_s=60.0, canary_dwell_s=2.0,
                limits=TOLERANT.limits)
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(plan)
    _when(world, e, lambda: e.state.state == "shifting" and e.state.weight_new == 10
          and e.state.moving_to is None, lambda: world.killed.add("xgw1"))
    st = _run(e)
    assert st.state == "rolled_back", st.reason
    assert list(st.lost) == ["xgw1"] and "step 1 (10%)" in (st.reason or "")
    assert routing.read_all(world.store)["xgw1"].withdraw


def test_a_resumed_runner_keeps_a_lost_gateway_out(world: World) -> None:
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(PLAN)
    _when(world, e, lambda: e.state.moving_to == 50,
          lambda: world.failed_closed.update(xgw2="eth1"))
    _run(e)
    # a new migration after the operator fixed the gateway: parity passes, the gateway is in
    world.failed_closed.clear()
    world.report_all()
    drv2 = make_driver(world)
    e2 = _engine(world, drv2)
    e2.start(PLAN)
    st = _run(e2)
    assert st.state == "shifted" and st.lost == {}
    assert not any(o.withdraw for o in routing.read_all(world.store).values())


def test_a_runner_killed_before_its_rollback_ended_is_followed_by_one_that_ends_it(
        world: World) -> None:
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(PLAN)
    e.run(stop=lambda s: s.state == "shifting" and s.weight_new == 50)
    drv.drain({"xgw2": "its agent reports failed-closed"})
    e._new_lost()  # named and saved; then kill -9, before the rollback's move
    world.advance(eng.RUNNER_TIMEOUT_S + 1)
    drv2 = make_driver(world)
    e2 = _engine(world, drv2)
    e2.apply("resume")
    assert e2.state.state == "rolled_back" and drv2.lost == {"xgw2": drv.lost["xgw2"]}
    assert routing.read_all(world.store)["xgw2"].withdraw
    _legacy_carries_everything(world)


# ---- a breach attributed to one gateway -------------------------------------------------------

def test_a_breach_attributed_to_one_gateway_drains_it(world: World) -> None:
    # the 10 % step held; during the 50 % step's dwell xgw1's fast path drops, xgw2's does not
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(PLAN)
    _when(world, e, lambda: e.state.state == "shifting" and e.state.weight_new == 50
          and e.state.moving_to is None, lambda: world.drops.update(xgw1=7))
    st = _run(e)
    assert st.state == "rolled_back", st.reason  # not only stepped back to 10 % and paused
    assert list(st.lost) == ["xgw1"]
    assert "drop_no_route 7" in st.lost["xgw1"] and "xgw2 showed nothing" in st.lost["xgw1"]
    assert "guard breached at step 2 (50%): drops 7 > 0" in (st.reason or "")
    assert routing.read_all(world.store)["xgw1"].withdraw
    _legacy_carries_everything(world)


def test_a_breach_on_every_gateway_only_steps_back(world: World) -> None:
    drv = make_driver(world)
    e = _engine(world, drv)
    e.start(PLAN)
    _when(world, e, lambda: e.state.state == "shifting" and e.state.weight_new == 50
          and e.state.moving_to is None, lambda: world.drops.update(xgw1=3, xgw2=4))
    st = _run(e)
    assert st.state == "paused" and st.weight_new == 10 and st.lost == {}, st.reason


def test_attribution_needs_one_gateway_apart_from_the_others() -> None:
    drop = ["fast path dropped 3 packets (drop_no_route 3)"]
    assert attribute({"a": drop, "b": []}, {}, 50) == {
        "a": "fast path dropped 3 packets (drop_no_route 3), while b showed nothing"}
    assert attribute({"a": drop, "b": drop}, {}, 50) == {}  # both: not one gateway's
    assert attribute({"a": drop}, {}, 50) == {}  # one gateway read: nothing to compare
    # no other sign: the one target that forwarded nothing while the others carried traffic
    assert list(attribute({"a": [], "b": [], "c": []}, {"a": 0, "b": 900, "c": 800}, 50)) == [
        "a"]
    assert attribute({"a": [], "b": []}, {"a": 0, "b": 10}, 50) == {}  # too little traffic
    assert attribute({"a": [], "b": []}, {"a": 0, "b": 0}, 50) == {}


def test_failed_closed_reads_the_agents_contract() -> None:
    st = {"health": "failed-closed", "message": "eth1: XDP program 42 is not ours",
          "fastpath": {"ok": False, "interface": "eth1"}}
    why = failed_closed(st)
    assert why is not None and "eth1: XDP program 42" in why and "interface" in why
    assert failed_closed({"health": "ok"}) is None
    assert failed_closed({"health": "degraded", "message": "store down"}) is None


@pytest.mark.parametrize("value", [0, 0.5, -1, "20", True, None, float("nan")])
def test_agent_lost_s_is_validated(value: object) -> None:
    with pytest.raises(PlanError, match="agent_lost_s"):
        plan_from_json({"agent_lost_s": value})


def test_a_stored_plan_without_agent_lost_s_reads_the_default() -> None:
    assert plan_from_json({}).agent_lost_s == Plan().agent_lost_s == 20.0
    assert plan_from_json({"agent_lost_s": 45}).agent_lost_s == 45.0


# ---- the command ------------------------------------------------------------------------------

def _app() -> typer.Typer:
    app = typer.Typer()
    bench = typer.Typer()
    app.add_typer(bench, name="bench")
    commands.register(app, bench)
    return app


def test_migrate_start_exits_0_naming_the_lost_gateway(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(commands.DEPLOYMENT_ENV, raising=False)
    monkeypatch.setattr(commands, "_PROVIDERS", [])
    db = tmp_path / "m.db"
    world = World(SqliteStore(str(db)))
    real = world.sleep

    def sleep(s: float) -> None:
        real(s)
        if eng.read_state(world.store).moving_to == 50:
            world.killed.add("xgw2")  # the whole gateway: its agent and metrics
    world.sleep = sleep  # type: ignore[method-assign]

    def provider() -> commands.Deployment:
        def make(store, log):  # type: ignore[no-untyped-def]
            return make_driver(world, log=log)
        return commands.Deployment(f"sqlite://{db}", make, errors=(DriverError,),
                                   gateways=list(AGENTS))
    commands.add_provider(provider)
    runner, app = CliRunner(), _app()
    res = runner.invoke(app, ["migrate", "start", "--canary", CANARY, "--steps", "10,50,100",
                              "--dwell", "0s", "--agent-lost", "10s", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["state"] == "rolled_back" and list(doc["lost"]) == ["xgw2"]
    assert doc["plan"]["agent_lost_s"] == 10.0
    res = runner.invoke(app, ["migrate", "status", "--store", f"sqlite://{db}"])
    assert res.exit_code == 0 and "lost gateway xgw2" in res.stdout, res.output
    res = runner.invoke(app, ["migrate", "plan", "--agent-lost", "soon"])
    assert res.exit_code == 2 and "--agent-lost" in res.output
