"""The traffic policy in the kernel: the test-clock build of the gateway against the reference
model over timed packet sequences (marks, flowlet moves, aging, rate drops, counters), with the
policy on, off, and with VPC rates; and two tenants, one greedy, on the kernel alone.

The clocks are the test build's (build/xdp_gateway_testclock.o: bpf/policy.h reads test_clock[0]
instead of bpf_ktime_get_ns and test_clock[1] instead of bpf_jiffies64), set before every frame,
so kernel and model see the same times."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from crosszone.abi import layout
from crosszone.abi.objects import object_path
from crosszone.abi.reasons import Reason, XdpAction
from crosszone.fastpath.testing import model
from crosszone.fastpath.testing.model_policy import PolicyState
from crosszone.fastpath.testing.testrun import LOOPBACK_IFINDEX, TestRunner
from policy_flows import (
    BULK_DSCP,
    ELEPHANT_BYTES,
    FLOWS,
    GAP_TICKS,
    SMALL_DSCP,
    T0,
    TICK_NS,
    Flow,
    dscp_out,
    policy_tables,
    steps,
)

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
RATES = {"tenant-b": (200, 16)}  # tenant-b's flows in FLOWS are held to 200 Mbit/s
COUNTERS = ("small_packets", "bulk_packets", "flowlet_moves", "rate_drop_packets",
            "rate_drop_bytes", "small_bytes", "bulk_bytes", "bare_packets")
FORWARDED = (XdpAction.TX, XdpAction.REDIRECT)


@pytest.fixture(scope="module", params=["on", "off", "on_with_rates"])
def runner(request):
    obj = object_path("xdp_gateway_testclock")
    if not obj.exists():
        pytest.fail("build/xdp_gateway_testclock.o missing: run `make build`")
    t = policy_tables(enabled=request.param != "off",
                      rates=RATES if request.param == "on_with_rates" else None)
    r = TestRunner(t, obj)
    yield r
    r.close()


def _same(k: model.Result, m: model.Result) -> None:
    assert (k.action, k.reason, k.port, k.vpc_id) == (m.action, m.reason, m.port, m.vpc_id)
    assert k.data == m.data


def _same_flow_table(runner: TestRunner, st: PolicyState) -> None:
    """Slot for slot, the kernel's flow table holds the model's flows: the same salt, the byte
    count (which stops at demotion) and the jiffy of the last packet."""
    size = ctypes.sizeof(layout.CzFlow)
    with runner.maps.maps["flows"].mmap_values() as m:
        raw = bytes(m[: size * layout.CZ_FLOW_SLOTS])
    live = np.flatnonzero(np.frombuffer(raw, np.uint8)[layout.CzFlow.live.offset::size])
    assert sorted(live.tolist()) == sorted(st.flows)
    for i, want in st.flows.items():
        got = layout.CzFlow.from_buffer_copy(raw, i * size)
        assert (got.vpc_id, got.dir) == want.key[:2]
        assert (got.salt, got.bytes, got.last_tick) == (want.salt, want.bytes, want.last_tick)


@SETTINGS
@given(seq=steps)
def test_kernel_and_model_agree_on_timed_sequences(runner, seq):
    runner.clear_policy_state()
    st = PolicyState(now=T0)
    for i, payload, after, ecn in seq:
        st.now += after
        runner.set_clock(st.now)
        frame = FLOWS[i].frame(payload, (20 << 2) | ecn)
        _same(runner.run(frame), model.process(frame, runner.tables, LOOPBACK_IFINDEX, st))
    _same_flow_table(runner, st)
    for v in runner.tables.vpcs:
        k = runner.maps.policy_stats(v.vpc_id)
        m = st.counters(v.vpc_id)
        assert {c: getattr(k, c) for c in COUNTERS} == {c: getattr(m, c) for c in COUNTERS}


def test_flowlet_moves_agree_over_many_gaps(runner):
    """An elephant with a gap before every other packet: the kernel takes the model's path.
    The first four packets come without a gap: a flow not yet demoted that pauses for a gap
    starts a new message, so it must become an elephant first."""
    runner.clear_policy_state()
    st = PolicyState(now=T0)
    for n in range(64):
        st.now += GAP_TICKS * TICK_NS if n % 2 and n >= 4 else 1000
        runner.set_clock(st.now)
        frame = FLOWS[0].frame(1400)
        _same(runner.run(frame), model.process(frame, runner.tables, LOOPBACK_IFINDEX, st))
    moves = runner.maps.policy_stats(0).flowlet_moves
    assert moves == (st.counters(0).flowlet_moves)
    assert moves > 20 if runner.tables.flags else moves == 0


def test_a_greedy_tenant_does_not_starve_the_other():
    """tenant-a offers 11.5 Gbit/s against a 1 Gbit/s rate; tenant-b sends 0.58 Gbit/s under
    the same rate: every packet of tenant-b goes through, tenant-a gets its rate and its burst."""
    rate_mbps, burst_kib = 1000, 64
    t = policy_tables(rates={"tenant-a": (rate_mbps, burst_kib),
                             "tenant-b": (rate_mbps, burst_kib)})
    with TestRunner(t, object_path("xdp_gateway_testclock")) as r:
        greedy, modest = FLOWS[0], FLOWS[3]
        size = greedy.ip_bytes(1400)
        now, passed, modest_passed, modest_sent = T0, 0, 0, 0
        duration_us = 20_000
        for us in range(duration_us):
            now += 1000
            r.set_clock(now)
            res = r.run(greedy.frame(1400))
            if res.action in FORWARDED:
                passed += size
            else:
                assert res.reason == Reason.DROP_VPC_RATE
            if us % 20 == 0:
                modest_sent += 1
                modest_passed += r.run(modest.frame(1400)).action in FORWARDED
        allowed = rate_mbps * 1e6 / 8 * duration_us / 1e6 + burst_kib * 1024
        assert allowed - size <= passed <= allowed + size
        assert modest_passed == modest_sent
        a, b = r.maps.policy_stats(0), r.maps.policy_stats(1)
        assert a.rate_drop_packets == duration_us - passed // size
        assert b.rate_drop_packets == 0
        assert r.maps.reason_stats()[Reason.DROP_VPC_RATE][0] == a.rate_drop_packets


def test_a_new_requests_first_packets_are_small_both_ways_and_an_elephant_is_demoted():
    """A new connection through the kernel program and the model alike (issue 27): SYN,
    SYN-ACK, the handshake's ACK, the request and the first bytes of the reply are small in both
    directions; the reply's bytes past elephant_bytes are bulk, and the bare ACKs of either
    direction stay small without a flow slot of their own."""
    up, down = Flow(True, sport=40100), Flow(False, sport=40100)
    full = 1400  # down.ip_bytes(full) = 1440: the 4th full segment comes after 4320 bytes
    assert 2 * down.ip_bytes(full) < ELEPHANT_BYTES <= 3 * down.ip_bytes(full)
    seq = [(up, 0, "S", SMALL_DSCP), (down, 0, "SA", SMALL_DSCP), (up, 0, "A", SMALL_DSCP),
           (up, 120, "PA", SMALL_DSCP), (down, full, "A", SMALL_DSCP),
           (down, full, "A", SMALL_DSCP), (up, 0, "A", SMALL_DSCP), (down, full, "A", SMALL_DSCP),
           (down, full, "A", BULK_DSCP), (down, full, "PA", BULK_DSCP), (up, 0, "A", SMALL_DSCP),
           (down, 0, "A", SMALL_DSCP), (up, 0, "FA", SMALL_DSCP)]
    with TestRunner(policy_tables(), object_path("xdp_gateway_testclock")) as r:
        r.clear_policy_state()
        st = PolicyState(now=T0)
        marks = []
        for flow, payload, flags, _ in seq:
            st.now += 20_000
            r.set_clock(st.now)
            frame = flow.frame(payload, flags=flags)
            k = r.run(frame)
            _same(k, model.process(frame, r.tables, LOOPBACK_IFINDEX, st))
            assert k.action in FORWARDED, k
            marks.append(dscp_out(k.data, flow.to_storage))
        assert marks == [want for *_, want in seq]
        # only the two directions' data made flow slots; the bare segments none
        _same_flow_table(r, st)
        assert len(st.flows) == 2
        vpc = next(v.vpc_id for v in r.tables.vpcs if v.vni == up.vni)
        got = r.maps.policy_stats(vpc)
        assert {c: getattr(got, c) for c in COUNTERS} == {
            c: getattr(st.counters(vpc), c) for c in COUNTERS}
        assert (got.bare_packets, got.small_packets, got.bulk_packets) == (7, 11, 2)
        assert got.bulk_bytes == 2 * down.ip_bytes(full)
