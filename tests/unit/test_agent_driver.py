"""The product's migration driver (issue 23, deliverable 2) against fake agents, injected time.

A small world stands in for the deployment (fake_agents.py): fake agents that read their
gateway's routing object from the store and report it applied (unless killed), a fake legacy
adapter, and a router model that splits forwarded packets between the gateways by the link
bandwidth each announces. Every sleep of the driver or the engine advances the clock and the
world.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crosszone.migrate import engine as eng
from crosszone.migrate.agent_driver import AgentDriver, ProbeRound, parse_metrics
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
from crosszone.store.routing import GatewayRouting, RoutingObjectError
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import STATUS
from unit.fake_agents import AGENTS, CANARY, LEGACY, World, make_driver


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(SqliteStore(str(tmp_path / "s.db")))


_driver = make_driver

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


@pytest.mark.parametrize("move", ["canary_on", "full_weight"])
def test_the_source_lets_go_only_after_the_target_applied_and_the_routers_settled(
        world: World, move: str) -> None:
    """Make-before-break across the two sides: the legacy gateways withdraw the canary's
    prefixes (canary on) or drain (the 100 % step) only once every agent reported its object
    applied, and `announce_settle_s` later (the routers' BGP taking the announcement)."""
    drv = _driver(world, announce_settle_s=1.5)
    assert drv.parity(PLAN) == []
    seen: list[tuple[str, float, dict[str, object]]] = []
    legacy = drv.legacy
    for verb in ("withdraw", "drain"):
        real = getattr(legacy, verb)

        def spy(gateway: str, *a: object, _real=real, _verb=verb) -> None:
            seen.append((_verb, world.t, {g: world.applied[g] for g in AGENTS}))
            _real(gateway, *a)
        setattr(legacy, verb, spy)
    if move == "canary_on":
        t0, verb = world.t, "withdraw"
        drv.set_canary(PLAN, True)
        written = routing.read_all(world.store)
    else:
        drv.set_canary(PLAN, True)
        drv.set_weight(PLAN, 50)
        t0, verb = world.t, "drain"
        drv.set_weight(PLAN, 100)
        written = routing.read_all(world.store)
    acts = [x for x in seen if x[0] == verb and x[1] >= t0]
    assert len(acts) == len(LEGACY), seen
    for _verb, t, applied in acts:
        # every agent held its newest object when the source side let go...
        assert all(applied[g] is not None and applied[g].revision == written[g].revision
                   for g in AGENTS), (applied, written)
        # ...and the routers had the settle time on top
        assert t - t0 >= 1.5


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
        if world.t - t0 > 12:
            world.killed.discard("xgw2")  # restarted 12 s into the step: within agent_lost_s
    drv.sleep = sleep
    drv.set_weight(PLAN, 50)
    assert world.t - t0 >= 12 and drv.lost == {}
    assert world.applied["xgw2"] is not None and world.applied["xgw2"].bandwidth_mbps == \
        link_bandwidth(50, 2)
    assert any("xgw2" in m and "wants" in m for m in said)
    assert beats and beats[-1] > t0 + 11  # the runner's heartbeat went on while it waited
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


def test_a_gateway_that_does_not_apply_within_apply_timeout_is_lost_and_drained(
        world: World) -> None:
    drv = _driver(world, apply_timeout_s=5.0)
    world.killed.add("xgw1")
    t0 = world.t
    drv.set_weight(PLAN, 10)  # returns: no exception for a gateway that does not follow
    assert list(drv.lost) == ["xgw1"] and "apply_timeout_s" in drv.lost["xgw1"]
    assert 5 <= world.t - t0 < 10
    objs = routing.read_all(world.store)
    assert objs["xgw1"].withdraw and not objs["xgw2"].withdraw


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


@pytest.mark.parametrize("first", ["down", "no reading"])
def test_parity_reads_a_session_down_again_before_refusing(world: World, first: str) -> None:
    # an agent's last reading still says down right after the sessions came up, or its reader
    # had no answer from FRR yet: read again
    drv = _driver(world)
    hide = world.bgp_down if first == "down" else world.no_reading
    hide.add("xgw1")
    t0 = world.t
    real_sleep = world.sleep

    def sleep(s: float) -> None:
        real_sleep(s)
        if world.t - t0 > 3:
            hide.discard("xgw1")  # the agent's next reading sees it up
    drv.sleep = sleep
    assert drv.parity(PLAN) == [] and 3 < world.t - t0 < drv.session_settle_s
    # down for good: refused once the settle time is over, naming the session
    drv.sleep = real_sleep
    world.bgp_down.add("xgw2")
    t0 = world.t
    problems = drv.parity(PLAN)
    assert problems == ["xgw2: BGP session with 10.9.0.1 is not Established"]
    assert world.t - t0 >= drv.session_settle_s
