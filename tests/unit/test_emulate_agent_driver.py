"""The product's migration driver on the emulator: the emulator's own parts (no emulator needed).

What the routers' kernels must hold after a move (the independent measure beside the
product's converge_ms), whether the emulated agents own their routing (which driver the
emulator offers), the product's probes as the emulator runs them, and a move that times the
kernels beside the product's convergence.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from crosszone.linux import pids
from crosszone.migrate.plan import Plan
from crosszone.probe import config as probe_config
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import STATUS
from crosszone_lab.emulate import control_plane, frr, probes, storage, topology
from crosszone_lab.emulate.migration import (
    EmulatedAgentDriver,
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


def test_the_probes_configurations_are_the_products_and_read_the_served_document() -> None:
    p = _emu().dep.plan
    canary = p.spec.vpcs[-1].name
    eps = probes.endpoints(p, canary)
    # a probe in every VPC, the canary's with role canary: a fault in one VPC is seen
    assert set(eps) == {v.name for v in p.spec.vpcs}
    assert {vpc: role for vpc, (role, _) in eps.items()} == {
        v.name: "canary" if v.name == canary else "production" for v in p.spec.vpcs}
    assert {role for role, _ in probes.endpoints(p, None).values()} == {"production"}
    for vpc, (role, ep) in eps.items():
        assert ep.vpc.name == vpc
        cfg = probe_config.parse(probes.probe_config(p, role, ep))  # what the daemon reads
        assert cfg.role == role and cfg.name == probes.probe_name(vpc)
        node = p.storage_nodes[0]
        doc = storage.meta_document(p, node, 0).encode()
        t = next(t for t in cfg.targets if t.server == node.addr)
        assert (t.expect.size, t.expect.sha256) == (len(doc), hashlib.sha256(doc).hexdigest())
        assert len(cfg.targets) == len(p.storage_nodes) * (2 if ep.addr6 else 1)


def test_ensure_starts_each_probe_once_and_waits_for_its_first_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = _emu().dep.plan
    vpcs = sorted(v.name for v in p.spec.vpcs)
    db = SqliteStore(str(tmp_path / "s.db"))
    monkeypatch.setattr(control_plane, "CONTROL_DIR", tmp_path)
    started: list[list[str]] = []
    real_popen = subprocess.Popen

    def popen(argv: list[str], **kw: Any) -> Any:
        started.append(argv)
        cfg = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())
        # the daemon's first report, as `crosszone probe` writes it
        db.put("probe/" + cfg["name"], json.dumps({"role": cfg["role"],
                                                    "updated": time.time() + 0.5}).encode())
        return real_popen(["sleep", "30"], start_new_session=True)
    monkeypatch.setattr(probes.subprocess, "Popen", popen)
    try:
        canary = p.spec.vpcs[-1].name
        assert probes.ensure(p, db, canary) == vpcs
        assert all(a[:2] == ["ip", "netns"] and "probe" in a for a in started)
        assert probes.ensure(p, db, canary) == []  # running with the same configuration: kept
        # another canary: the two VPCs whose role changes get their probe started again
        other = p.spec.vpcs[0].name
        assert probes.ensure(p, db, other) == sorted([canary, other])
        assert "role: canary" in probes.config_file(other).read_text()
        assert "role: production" in probes.config_file(canary).read_text()
    finally:
        for vpc in vpcs:
            probes.stop(vpc)
    assert not any(pids.pidfile_alive(probes.pidfile(v)) for v in vpcs)


def test_a_move_times_the_routers_kernels_beside_the_products_convergence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from unit.fake_agents import AGENTS, LEGACY, FakeLegacy, FakeProbes, World
    from unit.test_agent_driver import PLAN

    emu = _emu()
    waited: list[tuple[str, float]] = []

    def fake_wait(expect: dict[str, Any], what: str, new: set[str] | None = None,
                  want_present: bool = False, timeout: float = 30.0,
                  stop: Any = None) -> None:
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


@pytest.mark.parametrize("fate", ["dies", "silent"])
def test_a_probe_that_never_reports_is_named_with_the_end_of_its_log(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fate: str) -> None:
    """A probe that dies, or never reports within the start timeout, fails `ensure` with its
    VPC and the end of its log (which `emulate down` removes): what a CI failure needs."""
    from crosszone_lab.emulate.kinds import DeployError

    p = _emu().dep.plan
    db = SqliteStore(str(tmp_path / "s.db"))
    monkeypatch.setattr(control_plane, "CONTROL_DIR", tmp_path)
    monkeypatch.setattr(probes, "START_TIMEOUT_S", 1.0)
    real_popen = subprocess.Popen

    def popen(argv: list[str], **kw: Any) -> Any:
        kw["stdout"].write(b"cannot write the report to the store (counting on): locked\n")
        kw["stdout"].flush()
        return real_popen(["true"] if fate == "dies" else ["sleep", "30"],
                          start_new_session=True)
    monkeypatch.setattr(probes.subprocess, "Popen", popen)
    try:
        with pytest.raises(DeployError) as e:
            probes.ensure(p, db, p.spec.vpcs[0].name)
    finally:
        for v in p.spec.vpcs:
            probes.stop(v.name)
    first = sorted(v.name for v in p.spec.vpcs)[0]
    what = "died" if fate == "dies" else "did not report within 1 s"
    assert f"the probe in VPC {first} {what}" in str(e.value)
    assert "counting on): locked" in str(e.value)
