"""`crosszone migrate` as a product command (issue 23, deliverable 5).

The command takes its deployment from a file (`--deployment`) or from a provider a tool
registered (the lab's emulator); here a provider hands it the fake world of
fake_agents.py (fake agents, fake legacy adapter), so the whole command runs: standby,
start to `shifted`, status, finish. The deployment file's parser is checked on its own, with a
fake adapter.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crosszone.migrate import commands, deployment_file, op_queue
from crosszone.migrate import engine as eng
from crosszone.migrate.agent_driver import AgentDriver, DriverError
from crosszone.migrate.deployment_file import DeploymentError
from crosszone.migrate.plan import Plan
from crosszone.migrate.probe_verdicts import StoreProbes
from crosszone.store import routing
from crosszone.store.sqlite_store import SqliteStore
from unit.fake_agents import AGENTS, CANARY, LEGACY, FakeLegacy, FakeProbes, World

PLAN_STEPS = Plan(steps=(10, 100))


def _app() -> typer.Typer:
    app = typer.Typer()
    bench = typer.Typer()
    app.add_typer(bench, name="bench")
    commands.register(app, bench)
    return app


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(commands.DEPLOYMENT_ENV, raising=False)
    monkeypatch.setattr(commands, "_PROVIDERS", [])
    db = tmp_path / "m.db"
    world = World(SqliteStore(str(db)))  # with the example intent (standby's gateways)

    def provider() -> commands.Deployment:
        def make(store, log):  # type: ignore[no-untyped-def]
            return AgentDriver(world.store, FakeLegacy(world), list(LEGACY), list(AGENTS),
                               FakeProbes(), scrape=world.scrape, clock=world.now,
                               wall=world.now, sleep=world.sleep, log=log)
        return commands.Deployment(f"sqlite://{db}", make, errors=(DriverError,),
                                   gateways=list(AGENTS))
    return CliRunner(), _app(), world, provider, db


def test_plan_needs_no_deployment(cli) -> None:
    runner, app, *_ = cli
    res = runner.invoke(app, ["migrate", "plan", "--steps", "10,100", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["plan"]["steps"] == [10, 100]


def test_without_a_deployment_the_command_says_what_to_give(cli) -> None:
    runner, app, *_ = cli
    res = runner.invoke(app, ["migrate", "start"])
    assert res.exit_code == 2
    assert "--deployment" in res.output


def test_standby_then_a_migration_to_shifted_then_finish(cli) -> None:
    runner, app, world, provider, db = cli
    commands.add_provider(provider)
    res = runner.invoke(app, ["migrate", "standby", "--store", f"sqlite://{db}"])
    assert res.exit_code == 0, res.output
    assert all(o.withdraw for o in routing.read_all(world.store).values())
    res = runner.invoke(app, ["migrate", "start", "--canary", CANARY, "--steps", "50,100",
                              "--dwell", "0s", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["state"] == "shifted" and doc["weight_new"] == 100
    steps = [h for h in doc["history"] if h["event"] == "step"]
    assert [h["weight_new"] for h in steps] == [50, 100] and all(
        "share" in h and "applied_ms" in h for h in steps)
    res = runner.invoke(app, ["migrate", "status", "--json"])
    assert json.loads(res.stdout)["state"] == "shifted"
    res = runner.invoke(app, ["migrate", "finish", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1])["state"] == "finished"
    assert all(world.legacy[g]["withdrawn"] for g in LEGACY)


def test_standby_is_refused_during_a_migration(cli) -> None:
    runner, app, _world, provider, db = cli
    commands.add_provider(provider)
    runner.invoke(app, ["migrate", "start", "--steps", "100", "--dwell", "0s"])
    res = runner.invoke(app, ["migrate", "standby", "--store", f"sqlite://{db}"])
    assert res.exit_code == 1 and "under way" in res.output


# ---- the deployment file --------------------------------------------------------------------

def _adapter(config: object) -> FakeLegacy:
    assert config == {"kind": "fake"}
    return FakeLegacy(World.__new__(World))


def test_a_deployment_file_makes_an_agent_driver(tmp_path: Path) -> None:
    doc = {"store": "sqlite:///x.db",
           "legacy": {"gateways": ["lgw1"], "adapter": {"kind": "fake"}},
           "agents": {"gateways": ["xgw1"], "metrics": {"xgw1": "10.0.0.1:9470"}},
           "convergence": {"share_tolerance": 2, "timeout_s": 10, "apply_timeout_s": None}}
    dep = deployment_file.parse(doc, adapter=_adapter)
    assert dep.store_url == "sqlite:///x.db" and dep.gateways == ["xgw1"]
    store = SqliteStore(str(tmp_path / "d.db"))
    drv = dep.make_driver(store, lambda _m: None)
    assert isinstance(drv, AgentDriver) and isinstance(drv.probes, StoreProbes)
    assert (drv.agents, drv.legacy_gateways, drv.metrics) == (["xgw1"], ["lgw1"],
                                                              {"xgw1": "10.0.0.1:9470"})
    assert (drv.share_tolerance, drv.share_timeout_s, drv.apply_timeout_s) == (2.0, 10.0, None)


@pytest.mark.parametrize("doc, words", [
    ([], "a mapping"),
    ({"legacy": {"gateways": ["a"]}, "other": 1}, "unknown keys other"),
    ({}, "legacy"),
    ({"legacy": {"gateways": "a"}}, "legacy.gateways"),
    ({"legacy": {"gateways": ["a"], "adapter": {"kind": "fake"}},
      "agents": {"metrics": {"x": 1}}}, "agents.metrics"),
    ({"legacy": {"gateways": ["a"], "adapter": {"kind": "fake"}},
      "convergence": {"share_tolerance": -1}}, "convergence.share_tolerance"),
    ({"legacy": {"gateways": ["a"], "adapter": {"kind": "fake"}},
      "convergence": {"speed": 1}}, "convergence"),
])
def test_a_deployment_file_that_cannot_be_used_names_the_key(doc: object, words: str) -> None:
    with pytest.raises(DeploymentError, match=words):
        deployment_file.parse(doc, adapter=_adapter)


def test_the_probes_verdicts_are_counted_since_the_previous_reading(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "p.db"))
    now = [100.0]
    probes = StoreProbes(store, wall=lambda: now[0])
    assert probes.read("canary") is None

    def put(name: str, role: str, reads: int, errors: int, p99: float) -> None:
        store.put(f"probe/{name}", json.dumps({"role": role, "updated": now[0], "reads": reads,
                                               "errors": errors, "p99_ms": p99}).encode())
    put("h1", "production", 100, 1, 20.0)
    put("c1", "canary", 10, 0, 30.0)
    r = probes.read("production")
    assert r is not None and (r.reads, r.errors, r.p99_ms) == (0, 0, 20.0)  # first sight
    put("h1", "production", 140, 3, 25.0)
    r = probes.read("production")
    assert r is not None and (r.reads, r.errors, r.p99_ms) == (40, 2, 25.0)
    put("h1", "production", 5, 0, 10.0)  # the probe restarted
    r = probes.read("production")
    assert r is not None and (r.reads, r.errors) == (5, 0)
    now[0] += 60  # it stopped reporting: a failed read per reading
    r = probes.read("production")
    assert r is not None and r.errors == 1


def test_the_file_takes_the_products_legacy_adapters(tmp_path: Path) -> None:
    doc = {"legacy": {"gateways": ["lgw1"],
                      "adapter": {"kind": "none", "routers": "skip-missing"}}}
    dep = deployment_file.parse(doc)
    drv = dep.make_driver(SqliteStore(str(tmp_path / "a.db")), lambda _m: None)
    assert isinstance(drv, AgentDriver)
    # the none adapter moves everything at the first weighted step: parity says so
    assert any("plan the steps as 100" in p for p in drv.parity(PLAN_STEPS))
    with pytest.raises(DeploymentError, match=r"legacy\.adapter"):
        deployment_file.parse({"legacy": {"gateways": ["lgw1"], "adapter": {"kind": "x"}}})


# ---- issue 25: the command's side of plans, poisoned states, runners, finish ------------------

@pytest.mark.parametrize("args", [
    ["--steps="], ["--steps=150"], ["--steps=-5,100"], ["--steps=100,10"], ["--steps=x,100"],
    ["--steps=abc"], ["--steps=50"], ["--dwell=-30"], ["--dwell=x"], ["--dwell=nan"],
    ["--dwell=inf"], ["--canary="],
])
def test_start_refuses_every_bad_plan_with_exit_2_and_writes_nothing(cli, args: list[str]
                                                                     ) -> None:
    runner, app, world, provider, _db = cli
    commands.add_provider(provider)
    res = runner.invoke(app, ["migrate", "start", *args])
    assert res.exit_code == 2, res.output
    assert world.store.get(eng.KEY) is None and world.store.get(eng.RUNNER) is None


@pytest.mark.parametrize("text, words", [("errors: -1\n", "a number >= 0"),
                                         ("errors: x\n", "a number >= 0"),
                                         ("speed: 1\n", "unknown guard")])
def test_start_refuses_bad_guard_limits(cli, tmp_path: Path, text: str, words: str) -> None:
    runner, app, world, provider, _db = cli
    commands.add_provider(provider)
    f = tmp_path / "g.yaml"
    f.write_text(text)
    res = runner.invoke(app, ["migrate", "start", "--guards", str(f)])
    assert res.exit_code == 2 and words in " ".join(res.output.split())
    assert world.store.get(eng.KEY) is None


def test_a_poisoned_stored_plan_is_one_line_not_a_traceback(cli) -> None:
    runner, app, world, provider, db = cli
    commands.add_provider(provider)
    st = eng.State(state="shifting", step=1, weight_new=50, plan=PLAN_STEPS.to_json())
    doc = st.to_json()
    doc["plan"]["dwell_s"] = "x"
    world.store.put(eng.KEY, json.dumps(doc).encode())
    for op in ("resume", "pause", "rollback", "finish"):
        res = runner.invoke(app, ["migrate", op])
        assert res.exit_code == 1 and "Traceback" not in res.output, res.output
        assert f"cannot {op}: the stored migration's plan cannot be used: stored " \
               "plan.dwell_s" in " ".join(res.output.split())
    res = runner.invoke(app, ["migrate", "status", "--store", f"sqlite://{db}", "--json"])
    assert res.exit_code == 0 and "stored plan.dwell_s" in json.loads(res.stdout)["error"]
    res = runner.invoke(app, ["migrate", "status", "--store", f"sqlite://{db}"])
    assert res.exit_code == 0 and "error: the stored migration's plan" in res.output


def test_a_second_runner_beside_a_live_one_refuses_naming_it(cli) -> None:
    runner, app, world, provider, _db = cli
    commands.add_provider(provider)
    owner = {"host": "gw-ctl-2", "pid": 4242, "nonce": "abc123"}
    world.store.put(eng.RUNNER, json.dumps({"owner": owner, "expires": time.time() + 600,
                                            "beat": time.time()}).encode())
    for args in (["run"], ["start", "--steps", "100"]):
        res = runner.invoke(app, ["migrate", *args])
        assert res.exit_code == 1, res.output
        assert "pid 4242 on gw-ctl-2 (nonce abc123)" in " ".join(res.output.split())
    assert world.store.get(eng.KEY) is None


def test_resume_right_after_a_runner_was_killed_takes_over_and_resumes(cli) -> None:
    runner, app, world, provider, _db = cli
    commands.add_provider(provider)
    res = runner.invoke(app, ["migrate", "start", "--canary", CANARY, "--steps", "50,100",
                              "--dwell", "0s"])
    assert res.exit_code == 0, res.output
    # the runner was killed a moment ago: its lease still runs for a little while
    owner = {"host": "gw-ctl", "pid": 999999, "nonce": "dead01"}
    world.store.put(eng.RUNNER, json.dumps({"owner": owner, "expires": time.time() + 0.5,
                                            "beat": time.time()}).encode())
    res = runner.invoke(app, ["migrate", "resume", "--json"])
    assert res.exit_code == 0, res.output
    assert "performs it and runs the migration itself" in " ".join(res.output.split())
    st = eng.read_state(world.store)
    assert st.history[-1]["event"] == "resume" and st.state == "shifted"
    ops = op_queue.recent(world.store, time.time())
    assert [(o["op"], o["status"], o["why"]) for o in ops] == [
        ("resume", "expired", "its runner stopped before taking it")]
    assert world.store.get(eng.RUNNER) is None  # released by the command that ran it


def test_finish_has_a_time_limit(cli) -> None:
    runner, app, world, _provider, db = cli
    grow = {"on": False}

    class StillForwarding(FakeLegacy):
        def forwarded_packets(self, gateway: str) -> int:
            if grow["on"]:
                world.fwd[gateway] += 10  # the old gateways never fall silent
            return super().forwarded_packets(gateway)

    def provider() -> commands.Deployment:
        def make(store, log):  # type: ignore[no-untyped-def]
            return AgentDriver(world.store, StillForwarding(world), list(LEGACY), list(AGENTS),
                               FakeProbes(), scrape=world.scrape, clock=world.now,
                               wall=world.now, sleep=world.sleep, log=log)
        return commands.Deployment(f"sqlite://{db}", make, errors=(DriverError,))
    commands.add_provider(provider)
    res = runner.invoke(app, ["migrate", "start", "--steps", "100", "--dwell", "0s"])
    assert res.exit_code == 0, res.output
    grow["on"] = True
    res = runner.invoke(app, ["migrate", "finish", "--timeout", "1s"])
    assert res.exit_code == 1
    assert "the drain did not end within 1 s (--timeout)" in " ".join(res.output.split())
    assert eng.read_state(world.store).state == "draining"
    assert world.store.get(eng.RUNNER) is None
    res = runner.invoke(app, ["migrate", "finish", "--timeout", "soon"])
    assert res.exit_code == 2 and "--timeout" in res.output
