"""Gateway kinds: the registry lists the two kinds, and a kind registered by a test alone reaches
the topology, the plan, `up`'s operations, the switch targets, the CLI and the demo's drops."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from crosszone.linux.netns import Cmd, Executor, Op, RecordingExecutor, in_ns
from crosszone_lab.emulate import commands, demo, deploy, kinds, topology
from crosszone_lab.emulate import state as st
from crosszone_lab.workload import runner

P = topology.PREFIX  # the emulator instance's namespace prefix (czemu- by default)
R = str(topology.RUN_DIR)

pytestmark = pytest.mark.unit
VPCS = [{"name": "a", "vni": 1001, "prefix": "192.168.0.0/16", "storage_facing": "100.64.0.0/16"}]


class FakeGateway:
    """A third kind that lives only in this test: no attach, one fixed drop counter."""

    name = "fake"
    letter = "f"
    attaches = False
    default_count = 0

    def configure(self, p: topology.Plan, gw: topology.Gateway) -> list[Op]:
        return [in_ns(gw.ns, "true", "fake-datapath")]

    def available(self) -> bool:
        return True

    def attach(self, ex: Executor, p: topology.Plan, gw: topology.Gateway) -> None:
        return None

    def detach(self, ns: str, pin_dir: Path) -> list[Op]:
        return []

    def drops(self, ex: Executor, gw: topology.Gateway) -> dict[str, int]:
        return {"fake_drops": 3}


@pytest.fixture
def fake() -> Iterator[FakeGateway]:
    kind = FakeGateway()
    kinds.register(kind)
    try:
        yield kind
    finally:
        kinds.unregister(kind.name)


def test_registry_lists_both_kinds() -> None:
    assert kinds.names() == ("legacy", "crosszone")
    assert kinds.switch_targets() == ("legacy", "crosszone", "both")
    assert kinds.default() == "legacy"
    assert not kinds.get("legacy").attaches and kinds.get("crosszone").attaches
    assert kinds.members("both") == ("legacy", "crosszone")
    assert kinds.members("crosszone") == ("crosszone",)
    # a crosszone-only start announces legacy first; `up` switches once attached
    assert kinds.startup_set("crosszone") == "legacy"
    assert kinds.startup_set("both") == "both" and kinds.startup_set("legacy") == "legacy"
    assert kinds.needs_attach("both") and not kinds.needs_attach("legacy")
    with pytest.raises(KeyError, match="known: legacy, crosszone"):
        kinds.get("nope")


def test_gateway_names_and_readiness_follow_the_kind() -> None:
    p = topology.plan(topology.parse({"vpcs": VPCS}))
    assert [(g.name, g.kind, g.index) for g in p.gateways] == [
        ("lgw1", "legacy", 1), ("lgw2", "legacy", 2),
        ("xgw1", "crosszone", 3), ("xgw2", "crosszone", 4)]
    lgw, xgw = p.gateways_of("legacy")[0], p.gateways_of("crosszone")[0]
    assert kinds.ready(lgw, {}) and not kinds.ready(xgw, {}) and kinds.ready(xgw, {"xgw1": True})
    assert kinds.by_gateway_name("xgw2") is kinds.get("crosszone")
    assert kinds.by_gateway_name("stray") is None


def test_registration_rejects_duplicates(fake: FakeGateway) -> None:
    with pytest.raises(ValueError, match="already registered"):
        kinds.register(fake)

    class SameLetter(FakeGateway):
        name = "other"

    with pytest.raises(ValueError, match="letter"):
        kinds.register(SameLetter())


def test_unknown_kind_in_topology_is_an_error() -> None:
    with pytest.raises(topology.TopologyError, match="unknown gateway kind"):
        topology.parse({"vpcs": VPCS, "gateways": {"fake": 1}}, source="t.yaml")
    with pytest.raises(topology.TopologyError, match="active"):
        topology.parse({"vpcs": VPCS, "active": "fake"}, source="t.yaml")


def test_fake_kind_reaches_plan_ops_and_switch(fake: FakeGateway) -> None:
    assert kinds.switch_targets() == ("legacy", "crosszone", "fake", "both")
    spec = topology.parse({"vpcs": VPCS, "gateways": {"legacy": 1, "crosszone": 0, "fake": 2},
                           "active": "fake"})
    assert spec.gateways.count("fake") == 2 and spec.gateways.total == 3
    p = topology.plan(spec)
    assert [(g.name, g.kind, g.index) for g in p.gateways] == [
        ("lgw1", "legacy", 1), ("fgw1", "fake", 2), ("fgw2", "fake", 3)]
    assert {f"{P}fgw1", f"{P}fgw2"} <= set(p.namespaces)
    ops = deploy.build_ops(p, "fake")
    cmds = [op for op in ops if isinstance(op, Cmd)]
    assert sum("fake-datapath" in op.argv for op in cmds) == 2
    # a kind without attach announces from the start under its own set, legacy does not
    confs = {str(o.path): o.text for o in ops if hasattr(o, "text")}
    assert "network 10.0.0.100/32" in confs[f"{R}/frr/{P}fgw1/frr.conf"]
    assert "network 10.0.0.100/32" not in confs[f"{R}/frr/{P}lgw1/frr.conf"]
    dep = deploy.Deployment(p, RecordingExecutor())
    state = st.State(topology="t", spec=spec.model_dump(mode="json"), active="fake")
    assert [g.name for g in dep.announced("fake", state)] == ["fgw1", "fgw2"]
    assert [g.name for g in dep.announced("both", state)] == ["lgw1", "fgw1", "fgw2"]
    c0 = {"ifname": "c0", "linkinfo": {"info_kind": "veth"},
          "stats64": {"rx": {"dropped": 0}, "tx": {"dropped": 1}}}
    ex = RecordingExecutor(outputs={
        ("ip", "-n", g.ns, "-d", "-s", "-j", "link", "show"): json.dumps([c0])
        for g in p.gateways_of("fake")})
    drops = demo.gateway_drops(ex, p, "fake")
    assert drops == {"interfaces": 2, "fake_drops": 6}


def test_fake_kind_reaches_the_cli(fake: FakeGateway) -> None:
    app, bench_app = typer.Typer(), typer.Typer()
    commands.register(app, bench_app)
    res = CliRunner().invoke(app, ["emulate", "switch", "--help"])
    assert res.exit_code == 0
    assert "legacy | crosszone | fake | both" in " ".join(res.output.split())


def test_workload_targets_are_plain_data() -> None:
    p = topology.plan(topology.parse({"vpcs": VPCS, "hosts": 2}))
    t = topology.workload_targets(p)
    assert [(e.name, e.ns) for e in t.endpoints] == [("h1-a", f"{P}h1-a"), ("h2-a", f"{P}h2-a")]
    assert t.servers == ("172.16.0.11", "172.16.0.12")
    argv = runner.worker_argv(t, 1, 5.0, 2)
    assert argv[:4] == ["ip", "netns", "exec", f"{P}h2-a"]
    # the second endpoint starts with the second server (rotated list)
    assert argv[argv.index("--servers") + 1] == "172.16.0.12,172.16.0.11"
    assert argv[argv.index("--shard-bytes") + 1] == str(64 << 20)


def test_switch_to_an_unknown_set_is_refused() -> None:
    dep = deploy.Deployment(topology.plan(topology.parse({"vpcs": VPCS})), RecordingExecutor())
    with pytest.raises(deploy.DeployError, match="legacy, crosszone or both"):
        dep.switch("nope")
