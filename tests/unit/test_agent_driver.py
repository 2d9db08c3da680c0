"""The product's migration driver (issue 23, deliverable 2) against fake agents, injected time.

A small world stands in for the deployment: fake agents that read their gateway's routing
object from the store and report it applied (unless killed), a fake legacy adapter, and a
router model that splits forwarded packets between the gateways by the link bandwidth each
announces (graceful shutdown and withdrawal take a gateway out; paths without link bandwidth
make plain ECMP). Every sleep of the driver or the engine advances the clock and the world.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from crosszone.agent.frr_config import facing_prefixes, with_halves
from crosszone.intent.cluster import load_cluster
from crosszone.migrate import engine as eng
from crosszone.migrate.agent_driver import (
    AgentDriver,
    DriverError,
    ProbeRound,
    ScrapeError,
    parse_metrics,
    standby,
)
from crosszone.migrate.moves import (
    AgentState,
    LegacyAction,
    Move,
    Sides,
    link_bandwidth,
    plan_canary,
    plan_move,
    plan_retire,
)
from crosszone.migrate.plan import Plan
from crosszone.store import routing
from crosszone.store.objects import split_cluster
from crosszone.store.routing import GatewayRouting, RoutingObjectError
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT, STATUS

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "examples" / "cluster.yaml")
CANARY = "tenant-b"

AGENTS = ["xgw1", "xgw2"]
LEGACY = ["lgw1", "lgw2"]
PPS = 10_000  # packets per second through all gateways together
FRAME = 1200  # bytes per frame


class World:
    """Clock, fake agents, fake legacy gateways and the routers' split of the traffic."""

    def __init__(self, store: SqliteStore) -> None:
        self.store = store
        self.t = 1000.0
        self.killed: set[str] = set()
        self.applied: dict[str, GatewayRouting | None] = dict.fromkeys(AGENTS)
        self.legacy: dict[str, dict[str, object]] = {
            g: {"bw": None, "drain": False, "withdrawn": False} for g in LEGACY}
        self.fwd: dict[str, float] = dict.fromkeys(AGENTS + LEGACY, 0.0)
        self.calls: list[tuple[str, str, int | None]] = []
        self.bgp_down: set[str] = set()
        self.drops: dict[str, int] = dict.fromkeys(AGENTS, 0)
        self.slow: set[str] = set()
        self.ecmp_only = False
        self.gro = 1  # frames per packet a legacy gateway counts
        self.legacy_bytes = False  # whether the legacy side has a bytes counter
        self.canary_withdrawn: dict[str, tuple[str, ...]] = {}
        #: the canary VPC's prefixes (a restore of only these leaves production withdrawn)
        self.canary_prefixes = [str(n) for v in CLUSTER.vpcs if v.name == CANARY
                                for n in with_halves(facing_prefixes(v))]
        store.put_many({INTENT + k: v for k, v in split_cluster(CLUSTER).items()})
        standby(store, AGENTS)  # the new gateways wait beside the legacy ones
        self.report_all()

    # the clock
    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.advance(max(s, 0.001))

    def advance(self, s: float) -> None:
        shares = self.shares()
        for g, x in shares.items():
            self.fwd[g] += PPS * s * x
        self.t += s
        self.report_all()

    # the agents
    def report_all(self) -> None:
        for gw in AGENTS:
            if gw in self.killed:
                continue
            raw = self.store.get(routing.key(gw))
            obj = GatewayRouting.from_bytes(raw) if raw else None
            self.applied[gw] = obj
            self.store.put(STATUS + gw, json.dumps({
                "revision": 1, "health": "ok", "message": "", "updated": self.t,
                "metrics": f"{gw}:9470",
                "routing": {"mode": "managed", "state_revision": obj.revision if obj else None,
                            "bandwidth_mbps": obj.bandwidth_mbps if obj else None}}).encode())

    def scrape(self, address: str) -> str:
        gw = address.split(":")[0]
        if gw in self.killed:
            raise ScrapeError(f"{address}: connection refused")
        if gw in self.slow:
            raise ScrapeError(f"{address}: timed out", slow=True)
        state = "Idle" if gw in self.bgp_down else "Established"
        return (f'crosszone_verdicts_total{{reason="fwd_to_storage",verdict="forward"}} '
                f'{int(self.fwd[gw])}\n'
                f'crosszone_verdict_bytes_total{{reason="fwd_to_storage",verdict="forward"}} '
                f'{int(self.fwd[gw] * FRAME)}\n'
                f'crosszone_verdicts_total{{reason="drop_no_route",verdict="drop"}} '
                f'{self.drops[gw]}\n'
                f'crosszone_bgp_session_up{{peer="10.9.0.1",state="{state}"}} '
                f'{0 if gw in self.bgp_down else 1}\n'
                'crosszone_bfd_session_up{peer="10.9.0.1"} 1\n')

    # the routers: each gateway's share of the traffic
    def paths(self) -> dict[str, float | None]:
        """Gateways the routers use, with their link bandwidth (None: none)."""
        out: dict[str, float | None] = {}
        for gw, obj in self.applied.items():
            if obj is None:
                out[gw] = None  # no object: the default, everything announced, no weight
                continue
            if obj.withdraw or obj.graceful_shutdown or obj.canary == "only":
                continue
            out[gw] = obj.bandwidth_mbps
        for gw, st in self.legacy.items():
            if st["withdrawn"] or st["drain"]:
                continue
            out[gw] = st["bw"]  # type: ignore[assignment]
        if not out:  # graceful shutdown: backup paths still carry when nothing else does
            out = {gw: None for gw, st in self.legacy.items() if not st["withdrawn"]}
        return out

    def shares(self) -> dict[str, float]:
        p = self.paths()
        if not p:
            return {}
        if self.ecmp_only or any(v is None for v in p.values()):
            return {g: 1 / len(p) for g in p}  # FRR: plain ECMP when one lacks the community
        total = sum(v for v in p.values() if v is not None)
        return {g: (v or 0) / total for g, v in p.items()}


class FakeLegacy:
    def __init__(self, world: World) -> None:
        self.w = world

    def set_weight(self, gateway: str, bandwidth_mbps: int) -> None:
        # as a router's route-map: the weight of what it announces, a withdrawn gateway
        # stays withdrawn
        self.w.calls.append(("set_weight", gateway, bandwidth_mbps))
        self.w.legacy[gateway].update(bw=bandwidth_mbps, drain=False)

    def drain(self, gateway: str) -> None:
        self.w.calls.append(("drain", gateway, None))
        self.w.legacy[gateway]["drain"] = True

    def withdraw(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        self.w.calls.append(("withdraw", gateway, None))
        if prefixes:  # the canary's: production traffic (the model's) is not affected
            self.w.canary_withdrawn[gateway] = tuple(prefixes)
            return
        self.w.legacy[gateway]["withdrawn"] = True

    def restore(self, gateway: str, prefixes: Sequence[str] = ()) -> None:
        self.w.calls.append(("restore", gateway, None))
        self.w.canary_withdrawn.pop(gateway, None)
        if not prefixes:
            self.w.legacy[gateway].update(bw=None, drain=False, withdrawn=False)
        elif set(prefixes) - set(self.w.canary_prefixes):
            self.w.legacy[gateway]["withdrawn"] = False  # production, with its weight

    def forwarded_packets(self, gateway: str) -> int:
        # a kernel gateway forwards GRO-merged packets: `gro` frames count once
        return int(self.w.fwd[gateway] / self.w.gro)

    def forwarded_bytes(self, gateway: str) -> int | None:
        return int(self.w.fwd[gateway] * FRAME) if self.w.legacy_bytes else None


class FakeProbes:
    def __init__(self) -> None:
        self.rounds = {"production": ProbeRound(32, 0, 20.0), "canary": ProbeRound(8, 0, 25.0)}

    def read(self, role: str) -> ProbeRound | None:
        return self.rounds.get(role)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(SqliteStore(str(tmp_path / "s.db")))


def _driver(world: World, **kw: object) -> AgentDriver:
    return AgentDriver(world.store, FakeLegacy(world), list(LEGACY), list(AGENTS), FakeProbes(),
                       scrape=world.scrape, clock=world.now, wall=world.now,
                       sleep=world.sleep, **kw)  # type: ignore[arg-type]


PLAN = Plan(canary=CANARY, steps=(10, 50, 100), dwell_s=2.0, canary_dwell_s=2.0)


# ---- the routing object ---------------------------------------------------------------------

def test_routing_object_round_trips_and_refuses_what_frr_cannot_take() -> None:
    obj = GatewayRouting(revision=3, canary="only", canary_vpcs=("c",), bandwidth_mbps=1000)
    assert GatewayRouting.from_bytes(obj.to_bytes()) == obj
    for bad in (b"[]", b"{", b'{"canary": "on"}', b'{"revision": 0}',
                b'{"revision": 1, "bandwidth_mbps": 0}', b'{"revision": 1, "canary": "x"}',
                b'{"revision": 1, "canary": "only"}', b'{"revision": 1, "extra": 1}',
                b'{"revision": true}', b'{"revision": 1, "withdraw": "yes"}'):
        with pytest.raises(RoutingObjectError):
            GatewayRouting.from_bytes(bad)


def test_next_revision_grows_over_every_gateway(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "r.db"))
    assert routing.next_revision(store) == 1
    store.put_many({routing.key("a"): GatewayRouting(revision=4).to_bytes(),
                    routing.key("b"): b"garbage"})
    assert routing.next_revision(store) == 5


# ---- what each move asks (pure) -------------------------------------------------------------

SIDES = Sides(tuple(AGENTS), tuple(LEGACY), agents_are_target=True, canary_vpcs=("c",),
              canary_prefixes=("100.66.0.0/16",))


def test_a_step_weighs_the_legacy_side_before_the_new_side_announces() -> None:
    m = plan_move(SIDES, 10, canary_on=True)
    assert m.before == tuple(LegacyAction("set_weight", g, link_bandwidth(90, 2)) for g in LEGACY)
    assert m.states == {g: AgentState(canary_vpcs=("c",), bandwidth_mbps=link_bandwidth(10, 2))
                        for g in AGENTS}
    assert m.after == ()


def test_full_weight_drains_the_legacy_side_after_the_new_side_carries_it() -> None:
    m = plan_move(SIDES, 100, canary_on=False)
    assert m.before == () and {a.verb for a in m.after} == {"drain"}
    assert all(s.bandwidth_mbps == link_bandwidth(100, 2) for s in m.states.values())


def test_zero_restores_legacy_first_and_keeps_only_the_canary() -> None:
    m = plan_move(SIDES, 0, canary_on=True)
    assert {a.verb for a in m.before} == {"restore"}
    assert all(s.canary == "only" and not s.withdraw and s.bandwidth_mbps
               for s in m.states.values())  # weighted: `skip-missing` routers go to it alone
    assert all(s.withdraw for s in plan_move(SIDES, 0, canary_on=False).states.values())


def test_the_way_back_weighs_the_agents_first_and_drains_them_at_the_end() -> None:
    back = Sides(tuple(AGENTS), tuple(LEGACY), agents_are_target=False, canary_vpcs=("c",),
                 canary_prefixes=("100.66.0.0/16",))
    m = plan_move(back, 25, canary_on=True)
    assert m.before == () and {a.verb for a in m.after} == {"set_weight"}
    assert all(s.bandwidth_mbps == link_bandwidth(75, 2) and s.canary == "off"
               for s in m.states.values())  # the canary VPC stays with the legacy side
    m = plan_move(back, 100, canary_on=False)
    assert {a.verb for a in m.before} == {"set_weight"}
    assert all(s.graceful_shutdown for s in m.states.values())
    # legacy gateways retired by an earlier migration: each is weighted, then announced again
    # (every prefix, named, so the restore keeps the weight)
    prod = ("10.0.0.100/32", "100.64.0.0/16")
    back = Sides(tuple(AGENTS), tuple(LEGACY), agents_are_target=False, canary_vpcs=("c",),
                 canary_prefixes=("100.66.0.0/16",), production_prefixes=prod)
    for weight, actions in ((25, "after"), (100, "before")):
        got = getattr(plan_move(back, weight, canary_on=True), actions)
        assert got == tuple(a for g in LEGACY for a in (
            LegacyAction("set_weight", g, link_bandwidth(weight, 2)),
            LegacyAction("restore", g, prefixes=prod + ("100.66.0.0/16",))))
    back = Sides(tuple(AGENTS), tuple(LEGACY), agents_are_target=False, canary_vpcs=("c",),
                 canary_prefixes=("100.66.0.0/16",))
    r = plan_retire(back)
    assert all(s.withdraw for s in r.states.values()) and {a.verb for a in r.after} == {
        "restore"}
    r = plan_retire(SIDES)
    assert {a.verb for a in r.before} == {"withdraw"}
    assert all(s == AgentState() for s in r.states.values())


def test_the_canary_moves_to_the_target_before_the_source_lets_it_go() -> None:
    on = plan_canary(SIDES, 0, on=True)
    assert all(s.canary == "only" for s in on.states.values()) and on.before == ()
    assert on.after == tuple(LegacyAction("withdraw", g, prefixes=("100.66.0.0/16",))
                             for g in LEGACY)
    off = plan_canary(SIDES, 0, on=False)
    assert {a.verb for a in off.before} == {"restore"} and off.after == ()
    assert all(s.withdraw for s in off.states.values())
    back = Sides(tuple(AGENTS), tuple(LEGACY), agents_are_target=False, canary_vpcs=("c",),
                 canary_prefixes=("100.66.0.0/16",))
    on = plan_canary(back, 0, on=True)
    assert {(a.verb, a.prefixes) for a in on.before} == {("restore", ("100.66.0.0/16",))}
    assert all(s.canary == "off" and not s.withdraw for s in on.states.values())
    assert plan_canary(Sides((), (), True), 0, True) == Move()  # no canary: nothing


# ---- metrics --------------------------------------------------------------------------------

def test_parse_metrics_reads_forwarded_drops_and_sessions() -> None:
    text = ('# TYPE crosszone_verdicts counter\n'
            'crosszone_verdicts_total{reason="fwd_to_storage",verdict="forward"} 10\n'
            'crosszone_verdicts_total{reason="fwd_to_compute",verdict="forward"} 5\n'
            'crosszone_verdicts_total{reason="drop_no_route",verdict="drop"} 2\n'
            'crosszone_verdicts_total{reason="pass_bgp",verdict="pass"} 7\n'
            'crosszone_verdict_bytes_total{reason="fwd_to_storage",verdict="forward"} 1000\n'
            'crosszone_bgp_session_up{peer="10.0.0.1",state="Established"} 1\n'
            'crosszone_bgp_session_up{peer="10.0.0.2",state="Active"} 0\n'
            'crosszone_bfd_session_up{peer="10.0.0.1"} 1\n')
    s = parse_metrics(text)
    assert (s.forwarded, s.forwarded_bytes, s.drops) == (15, 1000, {"drop_no_route": 2})
    assert s.bgp == {"10.0.0.1": True, "10.0.0.2": False} and s.bfd == {"10.0.0.1": True}


# ---- the driver against fake agents ---------------------------------------------------------

def test_a_step_waits_for_every_agent_then_for_the_traffic_share(world: World) -> None:
    drv = _driver(world)
    assert drv.parity(PLAN) == []
    drv.set_canary(PLAN, True)
    ms = drv.set_weight(PLAN, 10)
    m = drv.last_move
    assert m["share_reached"] and abs(m["share"] - 10) <= 5
    assert 0 < m["applied_ms"] <= m["converge_ms"] == round(ms, 1)
    objs = routing.read_all(world.store)
    assert {o.bandwidth_mbps for o in objs.values()} == {link_bandwidth(10, 2)}
    # the legacy side took its weight before the objects were written
    assert world.calls[:2] == [("withdraw", g, None) for g in LEGACY]  # the canary's
    assert world.canary_withdrawn == dict.fromkeys(LEGACY, tuple(drv.canary_prefixes(PLAN)))
    assert world.calls[2:4] == [("set_weight", g, link_bandwidth(90, 2)) for g in LEGACY]
    drv.set_weight(PLAN, 100)
    assert drv.last_move["share_reached"] and drv.last_move["share"] >= 95
    assert [c[0] for c in world.calls[-2:]] == ["drain", "drain"]


def test_a_killed_agent_holds_the_step_until_it_is_back(world: World) -> None:
    drv = _driver(world, log_every_s=1.0)
    said: list[str] = []
    drv.log = said.append
    beats: list[float] = []
    drv.beat = lambda: beats.append(world.t)
    world.killed.add("xgw2")
    t0 = world.t
    real_sleep = world.sleep

    def sleep(s: float) -> None:
        real_sleep(s)
        if world.t - t0 > 20:
            world.killed.discard("xgw2")  # the agent is restarted 20 s into the step
    drv.sleep = sleep
    drv.set_weight(PLAN, 50)
    assert world.t - t0 >= 20
    assert world.applied["xgw2"] is not None and world.applied["xgw2"].bandwidth_mbps == \
        link_bandwidth(50, 2)
    assert any("xgw2" in m and "wants" in m for m in said)
    assert beats and beats[-1] > t0 + 19  # the runner's heartbeat went on while it waited
    assert drv.last_move["share_reached"]


def test_a_share_that_cannot_be_reached_is_recorded_and_the_step_goes_on(world: World) -> None:
    drv = _driver(world, share_timeout_s=3.0, share_tolerance=0.5)
    world.ecmp_only = True  # routers that ignore link bandwidth: 50 %, whatever the weights
    drv.set_weight(PLAN, 10)
    assert drv.last_move["share_reached"] is False and drv.last_move["share"] is not None


def test_the_share_is_read_in_bytes_when_the_legacy_side_counts_merged_packets(
        world: World) -> None:
    # legacy gateways counting GRO-merged packets (6 frames each): in packets a 50 % step
    # reads about 86 %, in bytes it is 50 %
    world.gro = 6
    drv = _driver(world, share_timeout_s=5.0)
    drv.set_weight(PLAN, 50)
    assert drv.last_move["share_unit"] == "packets" and not drv.last_move["share_reached"]
    assert drv.last_move["share"] > 80
    world.legacy_bytes = True
    drv = _driver(world, share_timeout_s=5.0)
    drv.set_weight(PLAN, 50)
    assert drv.last_move["share_unit"] == "bytes" and drv.last_move["share_reached"]
    assert abs(drv.last_move["share"] - 50) <= 5


def test_apply_timeout_names_the_gateway(world: World) -> None:
    drv = _driver(world, apply_timeout_s=5.0)
    world.killed.add("xgw1")
    with pytest.raises(DriverError, match="xgw1"):
        drv.set_weight(PLAN, 10)


def test_parity_refuses_an_unmanaged_or_unhealthy_agent_and_a_down_session(world: World
                                                                            ) -> None:
    drv = _driver(world)
    assert drv.parity(Plan(source="legacy", target="other")) != []
    world.bgp_down.add("xgw1")
    st = json.loads(world.store.get(STATUS + "xgw2") or b"{}")
    st["routing"]["mode"] = "unmanaged"
    st["health"] = "rejecting"
    world.store.put(STATUS + "xgw2", json.dumps(st).encode())
    problems = drv.parity(PLAN)
    assert any("xgw1: BGP session with 10.9.0.1" in p for p in problems)
    assert any("xgw2" in p and "unmanaged" in p for p in problems)
    assert any("xgw2" in p and "rejecting" in p for p in problems)


def test_guards_read_probes_drops_sessions_and_agents(world: World) -> None:
    drv = _driver(world)
    assert drv.observe(PLAN) == {"errors": 0.0, "small_p99_factor": 0.4, "drops": 0.0,
                                 "sessions_down": 0.0, "agents_unhealthy": 0.0}
    world.drops["xgw1"] += 3
    world.bgp_down.add("xgw2")
    world.slow.add("xgw1")  # one slow reading is forgiven
    g = drv.observe(PLAN)
    assert g["sessions_down"] == 1 and g["agents_unhealthy"] == 0 and g["drops"] == 0
    world.slow.discard("xgw1")
    assert drv.observe(PLAN)["drops"] == 3
    world.killed.add("xgw2")
    assert drv.observe(PLAN)["agents_unhealthy"] == 1
    drv.probes.rounds["production"] = ProbeRound(32, 2, 200.0)  # type: ignore[attr-defined]
    g = drv.observe(PLAN)
    assert g["errors"] == 2 and g["small_p99_factor"] == 4.0


def test_canary_reads_the_canary_probes_against_production(world: World) -> None:
    drv = _driver(world)
    assert drv.probe_canary(PLAN) == {"canary_errors": 0.0, "canary_latency_factor": 0.5}
    drv.probes.rounds.pop("canary")  # type: ignore[attr-defined]
    assert drv.probe_canary(PLAN)["canary_errors"] == 1.0  # no canary probe: no verdict


# ---- the engine through the driver ----------------------------------------------------------

def _engine(world: World, drv: AgentDriver) -> eng.Engine:
    e = eng.Engine(world.store, drv, clock=world.now, sleep=world.sleep, tick_s=0.5)
    drv.beat = e.heartbeat
    return e


def test_a_whole_migration_and_back_through_the_agents(world: World) -> None:
    drv = _driver(world)
    e = _engine(world, drv)
    e.start(PLAN)
    assert {o.canary for o in routing.read_all(world.store).values()} == {"only"}
    st = e.run(stop=lambda s: s.state in eng.FINAL or s.state == "shifted")
    assert st.state == "shifted", st.reason
    moves = [h for h in st.history if h["event"] == "step"]
    assert [h["weight_new"] for h in moves] == [10, 50, 100]
    assert all(h["share_reached"] and h["applied_ms"] <= h["converge_ms"] for h in moves)
    e.apply("finish")
    st = e.run()
    assert st.state == "finished" and st.retired == LEGACY
    assert all(world.legacy[g]["withdrawn"] for g in LEGACY)
    assert all(o.bandwidth_mbps is None and o.canary == "on" and not o.withdraw
               for o in routing.read_all(world.store).values())
    assert world.shares() == {"xgw1": 0.5, "xgw2": 0.5}
    # and back: crosszone -> legacy (no canary on the legacy side)
    back = Plan(source="crosszone", target="legacy", canary=CANARY, steps=(50, 100),
                dwell_s=2.0, canary_dwell_s=2.0)
    drv2 = _driver(world)
    e2 = _engine(world, drv2)
    first = len(world.calls)
    e2.start(back)
    st = e2.run(stop=lambda s: s.state in eng.FINAL or s.state == "shifted")
    assert st.state == "shifted", st.reason
    # the legacy gateways, withdrawn by the first migration's retire, were announced again
    # with their weight at the first step, and each step's share was reached
    back_moves = [h for h in st.history if h["event"] == "step"]
    assert [h["weight_new"] for h in back_moves] == [50, 100]
    assert all(h["share_reached"] for h in back_moves), back_moves
    for g in LEGACY:  # each gateway's actions in their order: weighted, then announced
        mine = [c[0] for c in world.calls[first:] if c[1] == g]
        assert mine[mine.index("set_weight") + 1] == "restore"
    e2.apply("finish")
    assert e2.run().state == "finished"
    assert all(o.withdraw for o in routing.read_all(world.store).values())
    assert set(world.shares()) == set(LEGACY)


def test_a_killed_runner_resumes_without_taking_the_step_off_the_new_gateways(world: World
                                                                              ) -> None:
    drv = _driver(world)
    e = _engine(world, drv)
    e.start(PLAN)
    e.run(stop=lambda s: s.state == "shifting" and s.weight_new == 50)
    before = routing.read_all(world.store)
    # kill -9: no release, a new runner (new driver, new engine) resumes from the store
    world.advance(eng.RUNNER_TIMEOUT_S + 1)
    drv2 = _driver(world)
    writes: list[dict[str, GatewayRouting]] = []
    orig = drv2._write_states

    def spy(move):  # type: ignore[no-untyped-def]
        out = orig(move)
        writes.append(routing.read_all(world.store))
        return out
    drv2._write_states = spy  # type: ignore[method-assign]
    e2 = _engine(world, drv2)
    e2.apply("resume")
    # every object written on the way kept the 50 % weight: the canary re-assert did not
    # withdraw production from the new gateways
    assert writes and all(o.bandwidth_mbps == link_bandwidth(50, 2)
                          for w in writes for o in w.values())
    assert all(o.revision > before["xgw1"].revision for o in writes[-1].values())
    st = e2.run(stop=lambda s: s.state in eng.FINAL or s.state == "shifted")
    assert st.state == "shifted"


def test_a_guard_that_fails_while_a_step_waits_for_its_share_ends_the_wait(world: World
                                                                             ) -> None:
    # routers that cannot reach the step's share (the wait would last share_timeout_s), and
    # one new gateway that starts dropping 3 s into the step: the engine reads the guards
    # during the wait and rolls back at once, not after the timeout
    drv = _driver(world, share_timeout_s=30.0, poll_s=0.5)
    e = _engine(world, drv)
    e.start(Plan(canary=CANARY, steps=(10, 100), dwell_s=2.0, canary_dwell_s=2.0))
    real_sleep = world.sleep
    t0: list[float] = []

    def sleep(s: float) -> None:
        real_sleep(s)
        if e.state.moving_to == 10:  # the move to the first step is under way
            t0[:] = t0 or [world.t]
            if world.t - t0[0] > 3:
                world.drops["xgw1"] += 5
    world.ecmp_only = True
    drv.sleep = sleep
    st = e.run(stop=lambda s: s.state in eng.FINAL or s.state in ("shifted", "paused"))
    # (read only after the move, the drops it saw would be the first reading's baseline)
    assert st.state == "rolled_back" and "drops" in st.reason, st.reason
    step = next(h for h in st.history if h["event"] == "step")
    assert step["share_reached"] is False and step["converge_ms"] < 10_000, step
    assert drv.guard_check is None  # only during a step's move


def test_parity_reads_a_session_down_again_before_refusing(world: World) -> None:
    # an agent's last reading still says down right after the sessions came up: read again
    drv = _driver(world)
    world.bgp_down.add("xgw1")
    t0 = world.t
    real_sleep = world.sleep

    def sleep(s: float) -> None:
        real_sleep(s)
        if world.t - t0 > 3:
            world.bgp_down.discard("xgw1")  # the agent's next reading sees it up
    drv.sleep = sleep
    assert drv.parity(PLAN) == [] and 3 < world.t - t0 < drv.session_settle_s
    # down for good: refused once the settle time is over, naming the session
    drv.sleep = real_sleep
    world.bgp_down.add("xgw2")
    t0 = world.t
    problems = drv.parity(PLAN)
    assert problems == ["xgw2: BGP session with 10.9.0.1 is not Established"]
    assert world.t - t0 >= drv.session_settle_s
