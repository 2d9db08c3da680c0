"""Flows and timed packet sequences for the traffic policy's tests (model and kernel alike).

The example gateway's tables with the policy on (small thresholds, so that a few packets make
an elephant), frames of chosen flows and sizes in both directions and both families, and a
hypothesis strategy of timed sequences over a handful of flows. Expectations that do not come
from the model are derived here from the frames themselves (DSCP, ECN, checksums).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from hypothesis import strategies as st
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from crosszone.abi import layout
from crosszone.abi.ticks import kernel_tick_ns, ticks_for
from crosszone.compile.tables import Tables, rate_fields

from packet_fixtures import HOST_A1, tables, translate, vxlan

SMALL_DSCP, BULK_DSCP = 46, 10
ELEPHANT_BYTES = 4000
FLOWLET_GAP_NS = 100_000  # 100 us
FLOW_IDLE_NS = 5_000_000  # 5 ms
T0 = 1_000_000_000  # the clock starts at 1 s, so that "now - burst" does not wrap
# The flow state's clock (abi/ticks.py): this kernel's jiffies, and the durations in them.
TICK_NS = kernel_tick_ns()
GAP_TICKS = ticks_for(FLOWLET_GAP_NS, TICK_NS)
IDLE_TICKS = ticks_for(FLOW_IDLE_NS, TICK_NS)


def policy_tables(enabled: bool = True, rates: dict[str, tuple[int, int]] | None = None,
                  base: Tables | None = None) -> Tables:
    """The example tables with the policy's fields set (flag on or off) and VPC rates
    ({vpc name: (rate_mbps, burst_kib)})."""
    t = base or tables()
    rates = rates or {}
    vpcs = tuple(dataclasses.replace(v, **dict(zip(("rate_ns_per_mib", "burst_ns"),
                                                   rate_fields(*rates[v.name]))))
                 if v.name in rates else v for v in t.vpcs)
    flags = (layout.CZ_CFG_POLICY if enabled else 0) | (layout.CZ_CFG_RATES if rates else 0)
    return dataclasses.replace(t, vpcs=vpcs, flags=flags, small_dscp=SMALL_DSCP,
                               bulk_dscp=BULK_DSCP, elephant_bytes=ELEPHANT_BYTES,
                               flowlet_gap_ns=FLOWLET_GAP_NS, flow_idle_ns=FLOW_IDLE_NS,
                               _index={})


@dataclass(frozen=True)
class Flow:
    """One flow: direction, family, VNI, ports and the storage address."""

    to_storage: bool
    six: bool = False
    vni: int = 1001
    sport: int = 40000
    dport: int = 80
    udp: bool = False
    storage: str = "172.16.5.5"
    host: str = HOST_A1["ip"]

    def frame(self, payload: int, tos: int = 0, flags: str = "A") -> bytes:
        """A frame of this flow with payload bytes of L4 payload and this TOS/traffic class
        (TCP: with these flags)."""
        l4 = (UDP(sport=self.sport, dport=self.dport) if self.udp
              else TCP(sport=self.sport, dport=self.dport, flags=flags))
        if not self.to_storage:
            l4 = (UDP(sport=self.dport, dport=self.sport) if self.udp
                  else TCP(sport=self.dport, dport=self.sport, flags=flags))
        data = Raw(b"p" * payload)
        if self.to_storage:
            ip = (IPv6(src=HOST_A1["ip6"], dst=self.storage, tc=tos) if self.six
                  else IP(src=self.host, dst=self.storage, tos=tos, id=3))
            return bytes(vxlan(ip / l4 / data, vni=self.vni))
        dst = translate(HOST_A1["ip6"] if self.six else self.host, self.vni)
        ip = (IPv6(src=self.storage, dst=dst, tc=tos) if self.six
              else IP(src=self.storage, dst=dst, tos=tos, id=9))
        return bytes(Ether(src="02:00:00:00:30:01", dst="02:00:00:00:20:01") / ip / l4 / data)

    def ip_bytes(self, payload: int) -> int:
        """The inner IP length of frame(payload): what the policy counts."""
        return (40 if self.six else 20) + (8 if self.udp else 20) + payload


FLOWS = (
    Flow(True),
    Flow(True, sport=40001),
    Flow(True, six=True, storage="fd10::5"),
    Flow(True, vni=1002, udp=True),
    Flow(False),
    Flow(False, six=True, storage="fd10::5"),
    Flow(False, vni=1002, sport=40002),
)


def tos_of(ip: IP | IPv6) -> int:
    """TOS or traffic class."""
    return ip.tos if isinstance(ip, IP) else ip.tc


def layers(out: bytes, to_storage: bool) -> tuple[IP | None, IP | IPv6]:
    """(outer IPv4 header or None, inner IP header) of a forwarded frame."""
    eth = Ether(out)
    if to_storage:
        return None, eth[IP] if IP in eth else eth[IPv6]
    inner = eth[VXLAN].payload.payload
    return eth[IP], inner


def dscp_out(out: bytes, to_storage: bool) -> int:
    """The DSCP of a forwarded frame's inner packet."""
    return tos_of(layers(out, to_storage)[1]) >> 2


def checksums_valid(ip: IP) -> bool:
    """An IPv4 header whose checksum is right (scapy recomputes it from scratch)."""
    fresh = ip.copy()
    del fresh.chksum
    return bytes(IP(bytes(fresh)))[:20] == bytes(ip)[:20]


#: (flow index, L4 payload bytes, ns since the previous packet, ECN bits)
steps = st.lists(
    st.tuples(st.integers(0, len(FLOWS) - 1), st.integers(0, 1400),
              st.sampled_from([0, 1_000, 50_000, FLOWLET_GAP_NS - 1, FLOWLET_GAP_NS,
                               FLOW_IDLE_NS - 1, FLOW_IDLE_NS, TICK_NS - 1, TICK_NS,
                               (GAP_TICKS - 1) * TICK_NS, GAP_TICKS * TICK_NS,
                               (IDLE_TICKS - 1) * TICK_NS, IDLE_TICKS * TICK_NS,
                               (IDLE_TICKS + 2) * TICK_NS]),
              st.integers(0, 3)),
    min_size=1, max_size=40)
