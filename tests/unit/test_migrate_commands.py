"""`crosszone migrate` as a product command (issue 23, deliverable 5).

The command takes its deployment from a file (`--deployment`) or from a provider a tool
registered (the lab's emulator); here a provider hands it the fake world of
test_agent_driver (fake agents, fake legacy adapter), so the whole command runs: standby,
start to `shifted`, status, finish. The deployment file's parser is checked on its own, with a
fake adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crosszone.migrate import commands, deployment_file
from crosszone.migrate.agent_driver import AgentDriver, DriverError
from crosszone.migrate.deployment_file import DeploymentError
from crosszone.migrate.plan import Plan
from crosszone.migrate.probe_verdicts import StoreProbes
from crosszone.store import routing
from crosszone.store.sqlite_store import SqliteStore
from unit.test_agent_driver import AGENTS, CANARY, LEGACY, FakeLegacy, FakeProbes, World

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
