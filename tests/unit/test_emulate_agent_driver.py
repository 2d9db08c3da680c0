"""The product's migration driver on the emulator: the emulator's own parts (no emulator needed).

What the routers' kernels must hold after a move (the independent measure beside the
product's converge_ms), whether the emulated agents own their routing (which driver the
emulator offers), the emulator's probe rounds as the product's Probes, and a move that times
the kernels beside the product's convergence.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crosszone.migrate.plan import Plan
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import STATUS
from crosszone_lab.emulate import frr, migration, topology
from crosszone_lab.emulate.migration import (
    EmulatedAgentDriver,
    EmulatorProbes,
    EmulatorView,
    agents_manage_routing,
    kernel_expectation,
)

ROOT = Path(__file__).resolve().parents[2]


def _emu() -> EmulatorView:
    p = topology.plan(topology.load(ROOT / "examples" / "migrate.yaml"))
    return EmulatorView(type("Dep", (), {"plan": p})())  # type: ignore[arg-type]


def test_kernel_expectation_follows_the_weight_and_keeps_the_canary_with_the_target() -> None:
    emu = _emu()
    canary = emu.dep.plan.spec.vpcs[-1].name
    plan = Plan(source="legacy", target="crosszone", canary=canary)
    src, dst = emu.sides(plan)
    s, d = {f"g{g.index}" for g in src}, {f"g{g.index}" for g in dst}
    to_compute, to_storage = frr.gateway_prefixes(emu.dep.plan)
    exp, new = kernel_expectation(emu, plan, 25, canary_on=True)
    assert new == d
    assert set(exp) == set(to_compute + to_storage) - set(emu.canary_prefixes(plan))
    assert all(v == (s | d, 25.0) for v in exp.values())
    assert all(v == (d, None) for v in kernel_expectation(emu, plan, 100, False)[0].values())
    exp0, _ = kernel_expectation(emu, plan, 0, False)
    assert set(exp0) == set(to_compute + to_storage) and all(v == (s, None)
                                                             for v in exp0.values())


def test_the_emulator_offers_the_product_driver_only_when_every_agent_owns_routing(
        tmp_path: Path) -> None:
    emu = _emu()
    store = SqliteStore(str(tmp_path / "s.db"))
    xgws = [g for g in emu.dep.plan.gateways if g.kind == "crosszone"]
    assert not agents_manage_routing(emu.dep, store)  # no agent has reported
    for i, gw in enumerate(xgws):
        mode = "managed" if i else "unmanaged"
        store.put(STATUS + gw.name, json.dumps({"routing": {"mode": mode}}).encode())
    assert not agents_manage_routing(emu.dep, store)
    store.put(STATUS + xgws[0].name, json.dumps({"routing": {"mode": "managed"}}).encode())
    assert agents_manage_routing(emu.dep, store)


def test_emulator_probes_are_the_products_probe_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    emu = _emu()
    canary = emu.dep.plan.spec.vpcs[-1].name
    seen: list[int] = []

    def fake_round(targets: list[Any]) -> list[Any]:
        seen.append(len(targets))
        return [type("O", (), {"ok": i != 0, "ms": 10.0 + i, "error": "x"})()
                for i in range(len(targets))]
    monkeypatch.setattr(migration.probe, "run_round", fake_round)
    monkeypatch.setattr(migration.probe, "p99_ms", lambda outs: max(o.ms for o in outs))
    probes = EmulatorProbes(emu, lambda: canary)
    r = probes.read("canary")
    assert r is not None and r.reads == seen[-1] > 0 and r.errors == 1
    assert probes.read("production") is not None
    assert EmulatorProbes(emu, lambda: None).read("canary") is None


def test_a_move_times_the_routers_kernels_beside_the_products_convergence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from unit.test_agent_driver import AGENTS, LEGACY, PLAN, FakeLegacy, FakeProbes, World

    emu = _emu()
    waited: list[tuple[str, float]] = []

    def fake_wait(expect: dict[str, Any], what: str, new: set[str] | None = None,
                  want_present: bool = False, timeout: float = 30.0) -> None:
        waited.append((what, timeout))
    monkeypatch.setattr(emu, "_wait", fake_wait)
    monkeypatch.setattr(emu, "_record_active", lambda plan, w: None)
    monkeypatch.setattr(emu, "sides", lambda plan: (
        [g for g in emu.dep.plan.gateways if g.kind == "legacy"],
        [g for g in emu.dep.plan.gateways if g.kind == "crosszone"]))
    world = World(SqliteStore(str(tmp_path / "w.db")))
    drv = EmulatedAgentDriver(world.store, FakeLegacy(world), list(LEGACY), list(AGENTS),
                              FakeProbes(), scrape=world.scrape, clock=world.now,
                              wall=world.now, sleep=world.sleep, emu=emu)
    drv.set_weight(Plan(canary=None, steps=PLAN.steps), 50)
    assert waited and waited[0][0] == "kernel weights of step 50%"
    m = drv.moves[-1]
    assert m["weight_new"] == 50 and m["share_reached"] and m["kernel_ms"] is not None
    assert {"converge_ms", "applied_ms", "announce_ms", "t"} <= set(m)
