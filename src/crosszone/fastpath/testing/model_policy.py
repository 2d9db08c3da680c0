"""Reference model of `bpf/policy.h`: per-flow soft state, DSCP marking, flowlets, VPC rates.

`PolicyState` holds what the kernel keeps in its flows, vpc_buckets and policy_stats maps, and
the two clocks (set by the caller: time is injected, as the test build's test_clock map is set by
the fast-path tests): `now` in ns for the token buckets, and the jiffies the flow state is kept
in, `ticks` (by default `now` cut into `tick_ns` ticks, abi/ticks.py). The durations in ticks are
the ones `encode_config` writes for that tick length. `model.process` runs a frame against one
state, so a sequence of frames through the model and through the kernel, with the same clock
readings, must leave the same marks, paths, drops and counters. The arithmetic is the C's,
modulo 2^64 where it wraps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crosszone.abi import layout
from crosszone.abi.ticks import kernel_tick_ns, ticks_at, ticks_for
from crosszone.compile.tables import Tables, Vpc
from crosszone.fastpath.testing.model_l4 import csum_replace

M64 = (1 << 64) - 1
DIR_TO_COMPUTE = 0  # CZ_DIR_TO_COMPUTE
DIR_TO_STORAGE = 1


def _signed(x: int) -> int:
    """(__s64) of a u64."""
    x &= M64
    return x - (1 << 64) if x >> 63 else x


@dataclass
class FlowSlot:
    """struct cz_flow: the key (as a tuple), the flowlet salt, bytes seen (until demotion),
    jiffies at the last packet."""

    key: tuple
    salt: int = 0
    bytes: int = 0
    last_tick: int = 0


@dataclass
class PolicyCounters:
    """struct cz_policy_counter of one VPC."""

    small_packets: int = 0
    bulk_packets: int = 0
    flowlet_moves: int = 0
    rate_drop_packets: int = 0
    rate_drop_bytes: int = 0
    small_bytes: int = 0
    bulk_bytes: int = 0
    bare_packets: int = 0


@dataclass
class Mark:
    """struct cz_mark: what the policy decided for one packet (on=False: leave it as it is)."""

    on: bool = False
    dscp: int = 0
    salt: int = 0

    def hash(self, h: int) -> int:
        """The flow hash that picks the ECMP bucket and the VXLAN source port."""
        return (h + self.salt * layout.CZ_FLOWLET_MIX) & 0xFFFFFFFF


@dataclass
class PolicyState:
    """The kernel's flows, vpc_buckets and policy_stats maps, and the clocks."""

    now: int = 0
    tick_ns: int = field(default_factory=kernel_tick_ns)
    flows: dict[int, FlowSlot] = field(default_factory=dict)
    buckets: dict[int, int] = field(default_factory=dict)
    stats: dict[int, PolicyCounters] = field(default_factory=dict)

    @property
    def ticks(self) -> int:
        """Jiffies now (cz_ticks)."""
        return ticks_at(self.now, self.tick_ns)

    def counters(self, vpc_id: int) -> PolicyCounters:
        """The VPC's counters (created at zero)."""
        return self.stats.setdefault(vpc_id, PolicyCounters())


class RateDrop(Exception):
    """The packet is over its VPC's rate (CZ_R_DROP_VPC_RATE)."""


def _rate_ok(st: PolicyState, vpc: Vpc, direction: int, length: int) -> bool:
    """cz_rate_ok."""
    if not vpc.rate_ns_per_mib:
        return True
    i = 2 * (vpc.vpc_id & (layout.CZ_MAX_VPCS - 1)) + direction
    t = st.buckets.get(i, 0)
    floor = (st.now - vpc.burst_ns) & M64
    if _signed(t - floor) < 0:
        t = floor
    t = (t + ((length * vpc.rate_ns_per_mib) >> 20)) & M64
    if _signed(t - st.now) > 0:
        c = st.counters(vpc.vpc_id)
        c.rate_drop_packets += 1
        c.rate_drop_bytes += length
        return False
    st.buckets[i] = t
    return True


def _account(st: PolicyState, t: Tables, key: tuple, vpc_id: int, h: int, length: int) -> Mark:
    """cz_flow_account."""
    now = st.ticks
    idle, gap = ticks_for(t.flow_idle_ns, st.tick_ns), ticks_for(t.flowlet_gap_ns, st.tick_ns)
    i0 = (h >> (32 - layout.CZ_FLOW_SLOT_BITS)) & ~1
    a, b = st.flows.get(i0), st.flows.get(i0 | 1)
    if a is not None and a.key == key:
        f = a
    elif b is not None and b.key == key:
        f = b
    else:
        a_free = a is None or (now - a.last_tick) & M64 >= idle
        b_free = b is None or (now - b.last_tick) & M64 >= idle
        if a_free:
            slot = i0
        elif b_free:
            slot = i0 | 1
        else:
            assert a is not None and b is not None
            slot = i0 if _signed(a.last_tick - b.last_tick) <= 0 else i0 | 1
        f = st.flows[slot] = FlowSlot(key, 0, 0, now)
    if (now - f.last_tick) & M64 >= idle:
        f.salt, f.bytes = 0, 0
    elif f.bytes < t.elephant_bytes and (now - f.last_tick) & M64 >= gap:
        f.bytes = 0  # a small flow's next message counts from zero; a demoted flow stays bulk
    c = st.counters(vpc_id)
    if f.bytes >= t.elephant_bytes:
        if (now - f.last_tick) & M64 >= gap:
            f.salt = (f.salt + 1) & 0xFFFFFFFF
            c.flowlet_moves += 1
        dscp = t.bulk_dscp
        c.bulk_packets += 1
        c.bulk_bytes += length
    else:
        dscp = t.small_dscp
        c.small_packets += 1
        c.small_bytes += length
        # the count stops at demotion: only "at least elephant_bytes" is asked of it
        f.bytes += length
    f.last_tick = now
    return Mark(True, dscp, f.salt)


def _mark_bare(st: PolicyState, t: Tables, vpc_id: int, length: int) -> Mark:
    """cz_mark_bare: a TCP segment without payload is small, salt 0, the flow table untouched."""
    c = st.counters(vpc_id)
    c.small_packets += 1
    c.small_bytes += length
    c.bare_packets += 1
    return Mark(True, t.small_dscp, 0)


def policy(st: PolicyState, t: Tables, vpc: Vpc | None, vpc_id: int, direction: int,
           key: tuple, h: int, length: int, bare: bool = False) -> Mark:
    """cz_policy: the rate check (RateDrop) and the flow's mark. vpc is None when replies do
    not read VPC records (no CZ_CFG_RATES); bare: a TCP segment without payload."""
    if not t.flags & (layout.CZ_CFG_POLICY | layout.CZ_CFG_RATES):
        return Mark()
    if vpc is not None and not _rate_ok(st, vpc, direction, length):
        raise RateDrop
    if t.flags & layout.CZ_CFG_POLICY:
        if bare:
            return _mark_bare(st, t, vpc_id, length)
        return _account(st, t, (vpc_id, direction) + key, vpc_id, h, length)
    return Mark()


def mark4(pkt: bytearray, off: int, dscp: int) -> None:
    """cz_mark4: DSCP into the IPv4 header at off, ECN kept, checksum updated."""
    old = bytes(pkt[off : off + 2])
    pkt[off + 1] = (dscp << 2) | (pkt[off + 1] & 3)
    check = int.from_bytes(pkt[off + 10 : off + 12], "big")
    check = csum_replace(check, old, bytes(pkt[off : off + 2]))
    pkt[off + 10 : off + 12] = check.to_bytes(2, "big")


def mark6(pkt: bytearray, off: int, dscp: int) -> None:
    """cz_mark6: DSCP into the IPv6 traffic class at off, ECN kept."""
    pkt[off] = (pkt[off] & 0xF0) | (dscp >> 2)
    pkt[off + 1] = ((dscp & 3) << 6) | (pkt[off + 1] & 0x3F)
