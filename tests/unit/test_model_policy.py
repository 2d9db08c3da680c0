"""The reference model's traffic policy against expectations derived independently of it:
demotion at the exact byte threshold, aging and the flowlet move at the exact jiffy (and never
before the intent's duration), ECN and checksums kept, a VPC held to its rate while another is
not touched, and the policy switched off changing nothing.
The same model is compared packet for packet with the kernel in tests/fastpath/test_policy.py."""

from __future__ import annotations

from hypothesis import example, given, settings
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6

from crosszone.abi import layout
from crosszone.abi.reasons import Reason, XdpAction
from crosszone.compile.encode import bind_ports
from crosszone.fastpath.testing import model
from crosszone.fastpath.testing.model_policy import PolicyState
from policy_flows import (
    BULK_DSCP,
    ELEPHANT_BYTES,
    FLOW_IDLE_NS,
    FLOWLET_GAP_NS,
    FLOWS,
    GAP_TICKS,
    IDLE_TICKS,
    SMALL_DSCP,
    T0,
    TICK_NS,
    Flow,
    checksums_valid,
    layers,
    policy_tables,
    steps,
    tos_of,
)

from fixture_runs import ifindexes
from packet_fixtures import tables

FORWARDED = (XdpAction.TX, XdpAction.REDIRECT)


def bound(t):
    """Tables with ports bound as the kernel runner binds them (frames arrive on lo)."""
    return bind_ports(t, ifindexes(tables(), None))


class Run:
    """Frames through the model with one policy state and an advancing clock."""

    def __init__(self, t) -> None:
        self.t = bound(t)
        self.st = PolicyState(now=T0)

    def send(self, flow: Flow, payload: int, after_ns: int = 0, tos: int = 0) -> model.Result:
        self.st.now += after_ns
        return model.process(flow.frame(payload, tos), self.t, 1, self.st)

    def at_tick(self, ticks: int, last_ns: bool = False) -> int:
        """ns to wait until the first (last_ns: the last) nanosecond of the jiffy `ticks` after
        the current one."""
        start = (self.st.now // TICK_NS + ticks) * TICK_NS
        return start + (TICK_NS - 1 if last_ns else 0) - self.st.now


def dscp(res: model.Result, flow: Flow) -> int:
    """The inner packet's DSCP (and the outer one's, which must be the same toward compute)."""
    assert res.action in FORWARDED, res
    outer, inner = layers(res.data, flow.to_storage)
    if outer is not None:
        assert outer.tos == tos_of(inner)
    return tos_of(inner) >> 2


def test_demotion_at_the_exact_byte_threshold():
    for flow in (FLOWS[0], FLOWS[2], FLOWS[4], FLOWS[5]):
        run = Run(policy_tables())
        payload = ELEPHANT_BYTES // 4 - flow.ip_bytes(0)  # four packets make exactly the threshold
        assert flow.ip_bytes(payload) * 4 == ELEPHANT_BYTES
        marks = [dscp(run.send(flow, payload, 1000), flow) for _ in range(6)]
        assert marks == [SMALL_DSCP] * 4 + [BULK_DSCP] * 2, flow


def test_one_byte_short_of_the_threshold_stays_small():
    run = Run(policy_tables())
    flow = FLOWS[0]
    payload = ELEPHANT_BYTES // 4 - flow.ip_bytes(0)
    for _ in range(3):
        run.send(flow, payload, 1000)
    assert dscp(run.send(flow, payload - 1, 1000), flow) == SMALL_DSCP
    # one byte of payload: a TCP segment without any is small whatever its flow has sent
    assert dscp(run.send(flow, 1, 1000), flow) == SMALL_DSCP  # 3999 bytes before it
    assert dscp(run.send(flow, 1, 1000), flow) == BULK_DSCP


def test_an_idle_flow_is_forgotten_and_small_again():
    """Forgotten once IDLE_TICKS jiffies have passed, one jiffy short it is not, and the
    shortest silence that forgets it is longer than FLOW_IDLE_NS."""
    run = Run(policy_tables())
    flow = FLOWS[4]
    for _ in range(5):
        run.send(flow, 1400, 1000)
    assert dscp(run.send(flow, 10, run.at_tick(IDLE_TICKS - 1, last_ns=True)), flow) == BULK_DSCP
    wait = run.at_tick(IDLE_TICKS)
    assert wait > FLOW_IDLE_NS
    assert dscp(run.send(flow, 10, wait), flow) == SMALL_DSCP


def _member(t, flow: Flow, salt: int) -> bytes:
    """The next hop's MAC for the flow at flowlet `salt`, from the group's buckets."""
    g = next(g for g in t.groups if g.name == "datasets")
    h = model.flow_hash(bytes(map(int, flow.host.split("."))),
                        bytes(map(int, flow.storage.split("."))),
                        flow.sport.to_bytes(2, "big") + flow.dport.to_bytes(2, "big"), 6)
    bucket = (h + salt * layout.CZ_FLOWLET_MIX) & (layout.CZ_ECMP_BUCKETS - 1)
    return next(n.mac for n in t.nexthops if n.nh_id == g.buckets[bucket])


def test_an_elephant_moves_after_a_gap_and_only_then():
    run = Run(policy_tables())
    flow = FLOWS[0]
    for _ in range(3):  # 3 x 1440 bytes: past the threshold
        first = run.send(flow, 1400, 1000)
    assert first.data[:6] == _member(run.t, flow, 0)
    seen = set()
    for salt in range(12):
        # one jiffy short of the gap, however long in ns: stays
        same = run.send(flow, 1400, run.at_tick(GAP_TICKS - 1, last_ns=True))
        assert same.data[:6] == _member(run.t, flow, salt)
        wait = run.at_tick(GAP_TICKS)  # the gap in jiffies: the next flowlet
        assert wait > FLOWLET_GAP_NS  # never before the intent's gap
        moved = run.send(flow, 1400, wait)
        assert moved.data[:6] == _member(run.t, flow, salt + 1)
        seen.add(moved.data[:6])
    assert len(seen) == 2  # both members of the pool carried flowlets
    assert run.st.counters(0).flowlet_moves == 12


def test_a_small_flow_never_moves():
    run = Run(policy_tables())
    flow = FLOWS[1]
    for _ in range(20):
        res = run.send(flow, 10, GAP_TICKS * TICK_NS)
        assert res.data[:6] == _member(run.t, flow, 0)
    assert run.st.counters(0).flowlet_moves == 0


def _independent_marks(seq):
    """PIAS per message, by the book: per flow, the bytes since it last started a message. A flow
    idle for IDLE_TICKS jiffies is forgotten; a flow still under ELEPHANT_BYTES and silent for
    GAP_TICKS jiffies starts a new message (a demoted one stays bulk until forgotten); a TCP
    segment without payload (SYN, ACK, FIN) is small and leaves its flow's state alone."""
    seen: dict[int, tuple[int, int]] = {}
    now = T0
    for i, payload, after, _ in seq:
        now += after
        if payload == 0 and not FLOWS[i].udp:
            yield SMALL_DSCP
            continue
        sent, last = seen.get(i, (0, None))
        if last is not None:
            idle = now // TICK_NS - last // TICK_NS
            if idle >= IDLE_TICKS or (sent < ELEPHANT_BYTES and idle >= GAP_TICKS):
                sent = 0
        yield SMALL_DSCP if sent < ELEPHANT_BYTES else BULK_DSCP
        seen[i] = (sent + FLOWS[i].ip_bytes(payload), now)


def _l4_valid(ip) -> bool:
    l4 = ip[TCP] if TCP in ip else ip[UDP]
    fresh = ip.copy()
    del (fresh[TCP] if TCP in fresh else fresh[UDP]).chksum
    again = (IP if isinstance(ip, IP) else IPv6)(bytes(fresh))
    return bytes(l4)[:20] == bytes(again[TCP] if TCP in again else again[UDP])[:20]


@settings(max_examples=60, deadline=None)
@given(seq=steps)
@example(seq=[(2, 415, 0, 0), (2, 993, 0, 0), (2, 993, 0, 0), (2, 1359, 0, 0), (2, 0, 0, 0)])
@example(seq=[(0, 1400, 0, 0), (0, 1400, GAP_TICKS * TICK_NS, 0), (0, 1400, 0, 0),
              (0, 1400, 0, 0), (0, 1400, 0, 0)])
def test_marks_follow_bytes_sent_and_keep_ecn_and_checksums(seq):
    run = Run(policy_tables())
    for (i, payload, after, ecn), want in zip(seq, _independent_marks(seq)):
        flow = FLOWS[i]
        res = run.send(flow, payload, after, tos=(20 << 2) | ecn)
        assert res.action in FORWARDED
        outer, inner = layers(res.data, flow.to_storage)
        assert tos_of(inner) == (want << 2) | ecn
        if outer is not None:
            assert outer.tos == tos_of(inner) and checksums_valid(outer)
        if isinstance(inner, IP):
            assert checksums_valid(inner)
        assert _l4_valid(inner)


@settings(max_examples=40, deadline=None)
@given(seq=steps)
def test_policy_off_changes_no_byte(seq):
    off = Run(policy_tables(enabled=False))
    plain = bound(tables())
    for i, payload, after, ecn in seq:
        frame = FLOWS[i].frame(payload, ecn)
        assert off.send(FLOWS[i], payload, after, ecn) == model.process(frame, plain, 1)
    assert off.st.flows == {} and off.st.stats == {}


def test_a_greedy_tenant_is_held_to_its_rate_and_the_other_is_not_touched():
    rate_mbps, burst_kib = 1000, 16
    run = Run(policy_tables(rates={"tenant-a": (rate_mbps, burst_kib),
                                   "tenant-b": (rate_mbps, burst_kib)}))
    greedy, modest = FLOWS[0], FLOWS[3]
    size = greedy.ip_bytes(1400)
    sent = {"greedy": 0, "modest": 0}
    dropped_modest = 0
    # 2 ms (every microsecond is a model run: 20 ms took minutes on a loaded box); greedy offers
    # 1440 B/us = 11.5 Gbit/s, ten times what its rate and burst allow; modest 0.58 Gbit/s.
    duration = 2_000_000
    for us in range(duration // 1000):
        res = run.send(greedy, 1400, 1000)
        if res.action in FORWARDED:
            sent["greedy"] += size
        else:
            assert res.reason == Reason.DROP_VPC_RATE
        if us % 20 == 0:
            res = run.send(modest, 1400)
            dropped_modest += res.action not in FORWARDED
            sent["modest"] += size
    allowed = rate_mbps * 1e6 / 8 * duration / 1e9 + burst_kib * 1024
    assert allowed - size <= sent["greedy"] <= allowed + size
    assert dropped_modest == 0
    c = run.st.counters(0)
    assert c.rate_drop_packets == duration // 1000 - sent["greedy"] // size
    assert run.st.counters(1).rate_drop_packets == 0
