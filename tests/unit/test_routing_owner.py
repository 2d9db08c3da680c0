"""The agent owns its host's routing (issue 23, deliverable 1): control code with a fake applier.

One event log records both the maps' writes (a sink) and FRR applies (a fake applier), so the
tests read the order: a VPC's prefixes are announced only after its maps are programmed and
withdrawn before its maps are removed; a rejected revision gets its withdrawn prefixes back;
an unchanged intent applies nothing; a gateway without `bgp:` is left alone; a failing FRR is
reported and retried without holding back the maps. frr_apply's FrrReloadApplier is tested
with a fake command runner.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from crosszone.agent.agent import Agent
from crosszone.agent.frr_apply import (
    ApplyError,
    Changes,
    FrrReloadApplier,
    FrrTarget,
    parse_test_output,
    routing_delta,
)
from crosszone.agent.frr_config import RoutingState
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.compile.diff import DictSink, MapOp
from crosszone.intent.cluster import load_cluster, parse_cluster, to_document
from crosszone.store.objects import split_cluster
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "examples" / "cluster.yaml")
IFX = (lambda name: 5)  # noqa: E731
C_FACING = "100.66.0.0/16"


def _objects(extra_vpc: bool = False, bgp: bool = True,
             pool_prefix: str | None = None) -> dict[str, bytes]:
    doc = to_document(CLUSTER)
    if extra_vpc:
        doc["vpcs"].append({"name": "tenant-c", "vni": 1003, "prefixes": ["10.50.0.0/16"],
                            "storage_facing": [C_FACING], "router_mac": "02:00:00:00:cc:01"})
    if not bgp:
        del doc["gateways"][0]["bgp"]
    if pool_prefix:
        doc["storage_pools"][1]["prefixes"] += f"\n{pool_prefix}"
    return split_cluster(parse_cluster(yaml.safe_dump(doc)))


class Log:
    """The order of map writes and FRR applies."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []


class LoggingSink(DictSink):
    def __init__(self, log: Log) -> None:
        super().__init__()
        self.events = log

    def apply(self, op: MapOp) -> None:
        super().apply(op)
        self.events.events.append(("maps", (op.kind, op.map)))


class FakeApplier:
    """Records each configuration; fails while `fail` is set."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.configs: list[str] = []
        self.fail: str | None = None
        self.drifted = False  # FRR was changed behind the agent's back

    def apply(self, config: str) -> Changes:
        if self.fail:
            raise ApplyError(self.fail)
        changed = not self.configs or self.configs[-1] != config or self.drifted
        self.drifted = False
        self.configs.append(config)
        self.log.events.append(("frr", config))
        return Changes(added=("x",) if changed else ())


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


@pytest.fixture
def world(tmp_path: Path):
    store = SqliteStore(str(tmp_path / "s.db"))
    log = Log()
    clock = Clock()
    applier = FakeApplier(log)
    owner = RoutingOwner("gw-a", applier, hostname="h", now=clock.now,
                         sessions=lambda: {"bgp": {"10.9.0.1": "Established"},
                                           "bfd": {"10.9.0.1": "up"}, "xdp": None})
    agent = Agent("gw-a", store, LoggingSink(log), IFX, now=clock.now, sleep=clock.sleep,
                  routing=owner)
    yield store, agent, owner, applier, log, clock
    store.close()


def _put(store: SqliteStore, objs: dict[str, bytes]) -> None:
    store.put_many({INTENT + k: v for k, v in objs.items()})


def _announces(config: str, prefix: str) -> bool:
    return f"  network {prefix}\n" in config


def test_first_start_programs_the_maps_then_announces(world) -> None:
    store, agent, owner, _applier, log, _ = world
    _put(store, _objects())
    res = agent.step(0)
    assert res is not None and res.mode == "full"
    kinds = [k for k, _ in log.events]
    assert kinds[-1] == "frr" and "maps" in kinds and kinds.index("frr") > max(
        i for i, k in enumerate(kinds) if k == "maps")
    assert owner.mode == "managed" and owner.applied_revision == agent.rec.revision
    st = agent.status()["routing"]
    assert st["mode"] == "managed" and st["revision"] == agent.rec.revision
    assert "100.64.0.0/16" in st["announced"] and "10.0.0.100/32" in st["announced"]
    assert st["bandwidth_mbps"] is None
    assert st["sessions"] == {"bgp": {"10.9.0.1": "Established"}, "bfd": {"10.9.0.1": "up"}}


def test_an_added_vpc_is_announced_after_its_maps_and_removed_after_its_withdrawal(world) -> None:
    store, agent, owner, _applier, log, _ = world
    _put(store, _objects())
    agent.step(0)
    log.events.clear()
    _put(store, _objects(extra_vpc=True))
    agent.step(0)
    frr = [i for i, (k, v) in enumerate(log.events) if k == "frr"]
    maps = [i for i, (k, _) in enumerate(log.events) if k == "maps"]
    assert maps and len(frr) == 1 and frr[0] > max(maps)  # no withdrawal needed, then announce
    assert _announces(str(log.events[frr[0]][1]), C_FACING)
    assert C_FACING in owner.status()["announced"]

    log.events.clear()
    _put(store, _objects())  # tenant-c goes
    agent.step(0)
    frr = [i for i, (k, _) in enumerate(log.events) if k == "frr"]
    deletes = [i for i, (k, v) in enumerate(log.events) if k == "maps" and v[0] == "delete"]
    assert deletes and frr[0] < min(deletes)  # withdrawn before the maps lose the VPC
    first = str(log.events[frr[0]][1])
    assert not _announces(first, C_FACING) and _announces(first, "100.64.0.0/16")
    assert C_FACING not in owner.status()["announced"]


def test_a_rejected_revision_gets_back_what_was_withdrawn_first(world) -> None:
    store, agent, _owner, _applier, log, _ = world
    _put(store, _objects(extra_vpc=True))
    agent.step(0)
    # tenant-c changes its storage-facing prefix, but the revision fails at the maps: the
    # sink refuses the write
    doc = to_document(parse_cluster(yaml.safe_dump(to_document(CLUSTER))))
    doc["vpcs"].append({"name": "tenant-c", "vni": 1003, "prefixes": ["10.50.0.0/16"],
                        "storage_facing": ["100.67.0.0/16"], "router_mac": "02:00:00:00:cc:01"})
    moved = split_cluster(parse_cluster(yaml.safe_dump(doc)))
    sink = agent.rec.sink
    original = sink.apply

    def refuse(op: MapOp) -> None:
        raise OSError("map full")
    sink.apply = refuse  # type: ignore[method-assign]
    log.events.clear()
    _put(store, moved)
    res = agent.step(0)
    assert res is not None and res.mode == "rejected"
    configs = [str(v) for k, v in log.events if k == "frr"]
    assert len(configs) == 2
    assert not _announces(configs[0], C_FACING)           # withdrawn before the maps
    assert _announces(configs[1], C_FACING)               # back: the maps still hold it
    assert not _announces(configs[1], "100.67.0.0/16")    # never announced unprogrammed
    sink.apply = original  # type: ignore[method-assign]


def test_unchanged_intent_and_pool_changes_apply_nothing(world) -> None:
    store, agent, _owner, applier, _log, _ = world
    _put(store, _objects())
    agent.step(0)
    n = len(applier.configs)
    for _ in range(3):
        agent.step(0)
    _put(store, _objects())  # the same objects written again: a full reconcile, same core
    res = agent.step(0)
    assert res is not None and res.mode == "full"
    assert len(applier.configs) == n
    grown = _objects(pool_prefix="172.18.9.0/24")  # a pool chunk: routing unaffected
    _put(store, {k: v for k, v in grown.items() if _objects().get(k) != v})
    res = agent.step(0)
    assert res is not None and res.mode == "delta"
    assert len(applier.configs) == n
    # a restarted agent renders the same text: the applier sees it once more, changes nothing
    owner2 = RoutingOwner("gw-a", applier, hostname="h")
    agent2 = Agent("gw-a", store, DictSink(), IFX, routing=owner2)
    agent2.step(0)
    assert applier.configs[-1] == applier.configs[n - 1]


def test_a_gateway_without_bgp_leaves_routing_alone(world) -> None:
    store, agent, _owner, applier, _log, _ = world
    _put(store, _objects(bgp=False))
    res = agent.step(0)
    assert res is not None and res.mode == "full"
    assert applier.configs == []
    st = agent.status()["routing"]
    assert st["mode"] == "unmanaged" and "no bgp: section" in st["message"]
    assert st["announced"] == []


def test_an_agent_without_routing_says_so(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    _put(store, _objects())
    agent = Agent("gw-a", store, DictSink(), IFX)
    agent.step(0)
    assert agent.status()["routing"]["mode"] == "off"
    store.close()


def test_a_failing_frr_is_reported_retried_and_never_holds_back_the_maps(world) -> None:
    store, agent, owner, applier, _log, clock = world
    applier.fail = "vtysh: bgpd is not running"
    _put(store, _objects())
    res = agent.step(0)
    assert res is not None and res.mode == "full" and agent.health == "ok"
    assert owner.mode == "error" and owner.errors == 1
    st = agent.status()["routing"]
    assert st["mode"] == "error" and "bgpd is not running" in st["message"]
    agent.step(0)
    assert owner.errors == 1  # not before retry_every
    applier.fail = None
    clock.t += owner.retry_every
    agent.step(0)
    assert owner.mode == "managed" and applier.configs
    assert owner.applied_revision == agent.rec.revision


def test_a_drifted_frr_is_corrected_at_the_next_check(world) -> None:
    store, agent, owner, applier, _log, clock = world
    _put(store, _objects())
    agent.step(0)
    n, applies = len(applier.configs), owner.applies
    clock.t += owner.check_every - 1
    agent.step(0)
    assert len(applier.configs) == n  # not due yet
    clock.t += 1
    agent.step(0)
    assert len(applier.configs) == n + 1  # the same text again: nothing differed
    assert owner.drift_corrections == 0 and owner.applies == applies
    applier.drifted = True
    clock.t += owner.check_every
    agent.step(0)
    assert owner.drift_corrections == 1 and applier.configs[-1] == applier.configs[n - 1]
    assert agent.status()["routing"]["drift_corrections"] == 1


def test_a_routing_state_change_is_applied_and_reported(world) -> None:
    store, agent, owner, applier, _log, _ = world
    _put(store, _objects())
    agent.step(0)
    owner.set_state(RoutingState(bandwidth_mbps=600, graceful_shutdown=True))
    agent.step(0)
    assert "set extcommunity bandwidth 600" in applier.configs[-1]
    st = agent.status()["routing"]
    assert st["bandwidth_mbps"] == 600 and st["graceful_shutdown"] is True
    metrics = generate_latest(_registry(owner)).decode()
    assert "crosszone_routing_bandwidth_mbps 600.0" in metrics
    assert 'crosszone_routing_announced{prefix="100.64.0.0/16"} 1.0' in metrics
    assert f"crosszone_routing_applied_revision {float(agent.rec.revision)}" in metrics
    assert 'crosszone_routing_mode{mode="managed"} 1.0' in metrics
    assert "crosszone_routing_graceful_shutdown 1.0" in metrics


def _registry(owner: RoutingOwner) -> CollectorRegistry:
    """The owner's families alone (the CLI registers it in the agent's registry)."""
    r = CollectorRegistry()
    r.register(owner)
    return r


# ---- the frr-reload applier, with a fake command runner ------------------------------------

TEST_OUT = """
Lines To Delete
===============
router bgp 65100
 address-family ipv4 unicast
  no network 100.66.0.0/16

Lines To Add
============
route-map CZ-TO-ZONES permit 10
 set extcommunity bandwidth 400
"""


def test_parse_test_output() -> None:
    deleted, added = parse_test_output(TEST_OUT)
    assert deleted[-1] == "  no network 100.66.0.0/16"
    assert added == ("route-map CZ-TO-ZONES permit 10", " set extcommunity bandwidth 400")
    assert parse_test_output("") == ((), ())


class FakeRunner:
    def __init__(self, tests: list[str], reload_rc: int = 0) -> None:
        self.tests, self.reload_rc = tests, reload_rc
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.calls.append(list(argv))
        if "--test" in argv:
            return subprocess.CompletedProcess(argv, 0, self.tests.pop(0), "")
        return subprocess.CompletedProcess(argv, self.reload_rc, "", "")


def _applier(tmp_path: Path, runner: FakeRunner, **kw) -> FrrReloadApplier:
    target = FrrTarget(config_file=tmp_path / "frr" / "frr.conf", rundir=tmp_path / "run", **kw)
    return FrrReloadApplier(target, runner)


def test_applier_reloads_only_when_something_differs(tmp_path: Path) -> None:
    runner = FakeRunner(["", TEST_OUT, ""])
    a = _applier(tmp_path, runner, pathspace="gwns")
    assert a.apply("hostname h\n").empty
    assert [c for c in runner.calls if "--reload" in c] == []
    assert (tmp_path / "frr" / "frr.conf").read_text() == "hostname h\n"
    ch = a.apply("hostname h2\n")  # not a migration step's lines: frr-reload.py
    assert not ch.empty and len([c for c in runner.calls if "--reload" in c]) == 1
    reload_call = next(c for c in runner.calls if "--reload" in c)
    assert reload_call[reload_call.index("-N") + 1] == "gwns"
    # a route-map changed: routes are sent again (soft out), sessions stay
    assert any("clear bgp ipv4 unicast * soft out" in c for c in runner.calls)
    assert runner.calls[-1][:3] == ["/usr/bin/vtysh", "-N", "gwns"]


def test_applier_reports_what_frr_did_not_take(tmp_path: Path) -> None:
    runner = FakeRunner([TEST_OUT, TEST_OUT], reload_rc=1)
    with pytest.raises(ApplyError, match="did not take"):
        _applier(tmp_path, runner).apply("x\n")


def test_applier_test_failure_is_an_apply_error(tmp_path: Path) -> None:
    class Failing(FakeRunner):
        def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(argv, 1, "", "vtysh: cannot connect")
    with pytest.raises(ApplyError, match="cannot connect"):
        _applier(tmp_path, Failing([])).apply("x\n")


def test_targets_system_and_per_namespace() -> None:
    system = FrrTarget()
    assert system.conf == Path("/etc/frr/frr.conf") and system.vtysh() == ["/usr/bin/vtysh"]
    ns = FrrTarget(pathspace="gw1")
    assert ns.conf == Path("/etc/frr/gw1/frr.conf") and ns.vtysh()[-2:] == ["-N", "gw1"]
    # an explicit socket directory is already per namespace: -N would be joined onto it
    sock = FrrTarget(pathspace="gw1", vty_socket=Path("/run/x/gw1"))
    assert "-N" not in sock.vtysh() and "-N" not in sock.reload_argv("--test")
    assert sock.conf == Path("/run/x/gw1/frr.conf")  # never /etc/frr's by default
    assert sock.reload_argv("--reload")[-3:] == ["--vty_socket", "/run/x/gw1",
                                                 "/run/x/gw1/frr.conf"]


def test_frr_reload_is_never_asked_to_write_vtyshs_own_configuration() -> None:
    # frr-reload.py runs `vtysh write` (to /etc/frr/frr.conf, whatever FRR it talks to) unless
    # the file it applies is <confdir>/frr.conf: the target always makes it so
    for t in (FrrTarget(), FrrTarget(pathspace="gw1"),
              FrrTarget(vty_socket=Path("/run/x"), config_file=Path("/run/x/frr.conf"))):
        argv = t.reload_argv("--reload")
        assert Path(argv[argv.index("--confdir") + 1]) / "frr.conf" == Path(argv[-1]) == t.conf
    with pytest.raises(ValueError, match=r"must be named frr\.conf"):
        FrrTarget(config_file=Path("/run/x/gateway.conf"))


# ---- the direct path for a migration step's lines --------------------------------------------

GOLDEN = Path(__file__).parent / "golden" / "frr"


def _golden(name: str) -> str:
    return (GOLDEN / f"cluster-gw-a{name}.conf").read_text()


def test_a_steps_difference_is_a_routing_delta_anything_else_is_not() -> None:
    base, weighted, drained = _golden(""), _golden("-weighted"), _golden("-drained")
    d = routing_delta(base, weighted)
    assert d is not None and d.removed == ()
    assert {line for _, line in d.added} == {"set extcommunity bandwidth 400"}
    assert {ctx for ctx, _ in d.added} == {("route-map CZ-TO-ZONES permit 10",),
                                           ("route-map CZ-TO-ZONES permit 20",),
                                           ("route-map CZ-TO-ZONES permit 30",)}
    d = routing_delta(weighted, drained)
    assert d is not None and d.added == ((("router bgp 65100",), "bgp graceful-shutdown"),)
    d = routing_delta(base, _golden("-withdrawn"))
    assert d is not None and d.added == () and len(d.removed) == 6
    assert (("router bgp 65100", "address-family ipv6 unicast"), "network fd64:a::/64") in \
        d.removed
    # a session, a hostname, a block that comes or goes: not a step's lines
    assert routing_delta(base, base.replace("timers connect 1", "timers connect 2")) is None
    assert routing_delta(base, base.replace("hostname gw-host", "hostname other")) is None
    assert routing_delta(base, base.replace(" network 100.64.0.0/16\n", "").replace(
        "router bgp 65100", "router bgp 65101")) is None


def test_a_delta_sets_weights_first_and_replaces_a_set_without_no() -> None:
    d = routing_delta(_golden("-weighted"), _golden("-weighted").replace("bandwidth 400",
                                                                        "bandwidth 800"))
    assert d is not None
    cmds = d.commands()
    assert not any(c.startswith("no ") for c in cmds)
    assert cmds[:4] == ["configure terminal", "route-map CZ-TO-ZONES permit 10",
                        "set extcommunity bandwidth 800", "end"]
    both = routing_delta(_golden("-withdrawn"), _golden("-weighted"))
    assert both is not None
    cmds = both.commands()
    assert max(i for i, c in enumerate(cmds) if c.startswith("set ")) < min(
        i for i, c in enumerate(cmds) if c.startswith("network "))  # weighted, then announced
    back = routing_delta(_golden("-weighted"), _golden(""))
    assert back is not None and "no set extcommunity bandwidth 400" in back.commands()


class FrrLike(FakeRunner):
    """frr-reload.py's --test answers as FakeRunner; vtysh's `show running-config` answers
    `running` (or the configuration the last direct commands were meant to reach: `obeys`)."""

    def __init__(self, tests: list[str], running: str, obeys: bool = True) -> None:
        super().__init__(tests)
        self.running, self.obeys, self.goal = running, obeys, running

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        if "show running-config" in argv:
            self.calls.append(list(argv))
            return subprocess.CompletedProcess(argv, 0, self.goal if self.obeys
                                               else self.running, "")
        return super().__call__(argv)


def test_a_step_goes_to_vtysh_directly_and_is_checked(tmp_path: Path) -> None:
    base, weighted = _golden(""), _golden("-weighted")
    runner = FrrLike(["", TEST_OUT, ""], running=base)
    a = _applier(tmp_path, runner, pathspace="gwns")
    a.apply(base)  # the first apply: frr-reload.py
    assert any("--test" in c for c in runner.calls)
    runner.calls.clear()
    runner.goal = weighted
    ch = a.apply(weighted)
    assert [c for c in runner.calls if "--test" in c or "--reload" in c] == []
    direct = runner.calls[0]
    assert direct[:3] == ["/usr/bin/vtysh", "-N", "gwns"]
    assert "set extcommunity bandwidth 400" in direct
    assert "clear bgp ipv4 unicast * soft out" in direct  # routes re-sent with the weight
    assert runner.calls[1][-1] == "show running-config"
    assert len(ch.added) == 3 and ch.deleted == () and a.direct_applies == 1
    owner = RoutingOwner("gw-a", a)
    assert (owner.status()["direct_applies"], owner.status()["direct_fallbacks"]) == (1, 0)
    assert (tmp_path / "frr" / "frr.conf").read_text() == weighted  # a restart reads it
    # the same lines again (the agent's drift check) are frr-reload.py's comparison
    for again in (weighted, weighted + "!\n"):
        runner.calls.clear()
        runner.tests = [""]
        assert a.apply(again).empty and [c for c in runner.calls if "--test" in c]


def test_a_direct_step_frr_did_not_take_falls_back_to_frr_reload(tmp_path: Path) -> None:
    base, weighted = _golden(""), _golden("-weighted")
    runner = FrrLike(["", TEST_OUT, ""], running=base, obeys=False)
    a = _applier(tmp_path, runner)
    a.apply(base)
    runner.calls.clear()
    runner.tests = [TEST_OUT, ""]
    ch = a.apply(weighted)
    assert len([c for c in runner.calls if "--reload" in c]) == 1 and not ch.empty
    assert a.direct_applies == 0 and a.direct_fallbacks == 1
