"""Hypothesis strategies for frames the gateway may see: valid ones of every kind, then random
mutations (truncation at any offset, flipped header bytes, wrong lengths)."""

from __future__ import annotations

from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
)
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Raw

from packet_fixtures import COMPUTE_MAC, GW_VTEP, PAYLOAD, ROUTER, STORAGE_MAC

VNIS = [1001, 1002, 1003, 4242]
VTEPS = ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.9"]
SRC4 = ["192.168.1.10", "192.168.1.11", "192.168.200.3", "10.200.0.5", "10.9.9.9"]
DST4 = ["172.16.5.5", "172.16.99.1", "172.16.98.1", "172.17.1.1", "172.30.0.1", "10.200.0.9"]
SRC6 = ["fd00:a::10", "fd00:a::beef", "fd00:b::1"]
DST6 = ["fd10::5", "fd10:0:0:1::9", "fd99::1"]
REPLY_DST = [
    "100.64.1.10",
    "100.64.1.11",
    "100.65.1.10",
    "100.64.9.9",
    "10.200.0.5",
    "100.66.0.1",
    "fd64:a::10",
    "fd64:a::11",
    "fd65::1",
]


def ipv4(draw, src, dst):
    kw = {}
    if draw(st.integers(0, 19)) == 0:
        kw["options"] = [b"\x01\x01\x01\x00"]
    frag = draw(st.sampled_from([0] * 8 + [1, 2]))
    if frag == 1:
        kw["flags"] = "MF"
    elif frag == 2:
        kw["frag"] = draw(st.integers(1, 100))
    ttl = draw(st.one_of(st.integers(0, 3), *[st.integers(4, 255)] * 4))
    tos = draw(st.sampled_from([0, 0xB8, 0x03]))
    return IP(src=src, dst=dst, ttl=ttl, tos=tos, id=draw(st.integers(0, 65535)), **kw)


def l4(draw, six):
    kind = draw(st.sampled_from(["tcp", "udp", "udp0", "icmp", "other"]))
    sport, dport = draw(st.integers(0, 65535)), draw(st.integers(0, 65535))
    if kind == "tcp":
        return TCP(sport=sport, dport=dport, flags="A")
    if kind in ("udp", "udp0"):
        return UDP(sport=sport, dport=dport, **({"chksum": 0} if kind == "udp0" else {}))
    if kind == "icmp":
        if six:
            return draw(
                st.sampled_from(
                    [
                        ICMPv6EchoRequest(id=sport),
                        ICMPv6ND_NS(tgt="fd00:a::1"),
                        ICMPv6ND_NA(tgt="fd00:a::10"),
                    ]
                )
            )
        return ICMP(id=sport)
    return Raw(b"\x00" * 4)


PAIRS = [(1001, "10.1.0.1"), (1001, "10.1.0.2"), (1002, "10.1.0.1"), (1003, "10.1.0.3")]
SRC_OF = {1001: ["192.168.1.10", "192.168.77.1"], 1002: ["192.168.1.10"], 1003: ["10.200.0.5"]}


@st.composite
def inner_packet(draw, vni=None):
    six = draw(st.booleans())
    payload = Raw(b"p" * draw(st.integers(0, 120)))
    if six:
        ip = IPv6(
            src=draw(st.sampled_from(SRC6)),
            dst=draw(st.sampled_from(DST6)),
            hlim=draw(st.one_of(st.integers(0, 3), *[st.integers(4, 255)] * 4)),
        )
        ext = draw(st.sampled_from([None] * 8 + [IPv6ExtHdrDestOpt, IPv6ExtHdrFragment]))
        if ext is not None:
            ip = ip / ext()
        return ip / l4(draw, True) / payload
    if draw(st.integers(0, 15)) == 0:
        return ARP(psrc="192.168.1.10", pdst="192.168.0.1")
    srcs = SRC_OF.get(vni, SRC4) if draw(st.integers(0, 3)) else SRC4
    ip = ipv4(draw, draw(st.sampled_from(srcs)), draw(st.sampled_from(DST4)))
    proto = l4(draw, False)
    if isinstance(proto, Raw):
        ip.proto = 47
    return ip / proto / payload


@st.composite
def valid_frame(draw):
    kind = draw(st.sampled_from(["vxlan", "vxlan", "vxlan", "reply", "reply", "other"]))
    eth = Ether(src="02:00:00:00:99:01", dst=draw(st.sampled_from([COMPUTE_MAC, STORAGE_MAC])))
    if draw(st.integers(0, 5)) == 0:
        eth = eth / Dot1Q(vlan=draw(st.integers(1, 4094)))
    if kind == "vxlan":
        if draw(st.integers(0, 3)):
            vni, vtep = draw(st.sampled_from(PAIRS))
        else:
            vni, vtep = draw(st.sampled_from(VNIS)), draw(st.sampled_from(VTEPS))
        flags = draw(st.sampled_from([0x08] * 6 + [0x0C, 0x00, 0xFF]))
        outer = IP(src=vtep, dst=GW_VTEP, id=0)
        return (
            eth
            / outer
            / UDP(sport=draw(st.integers(1024, 65535)), dport=4789)
            / VXLAN(flags=flags, vni=vni)
            / Ether(dst=ROUTER.get(vni, "02:00:00:00:aa:01"))
            / draw(inner_packet(vni))
        )
    if kind == "reply":
        dst = draw(st.sampled_from(REPLY_DST))
        if ":" in dst:
            ip = IPv6(
                src=draw(st.sampled_from(DST6)),
                dst=dst,
                hlim=draw(st.one_of(st.integers(0, 3), *[st.integers(4, 255)] * 4)),
                tc=draw(st.sampled_from([0, 0xB8])),
            )
            if draw(st.integers(0, 5)) == 0:
                ip = ip / IPv6ExtHdrDestOpt()
            return eth / ip / l4(draw, True) / PAYLOAD
        ip = ipv4(draw, draw(st.sampled_from(DST4)), dst)
        proto = l4(draw, False)
        if isinstance(proto, Raw):
            ip.proto = 47
        return eth / ip / proto / PAYLOAD
    return eth / draw(
        st.sampled_from(
            [
                IP(src="10.1.0.1", dst=GW_VTEP) / UDP(dport=3784),
                IP(src="10.1.0.1", dst=GW_VTEP) / TCP(dport=179),
                IP(src="10.1.0.1", dst="10.5.5.5") / UDP(dport=4789),
                ARP(pdst=GW_VTEP),
            ]
        )
    )


@st.composite
def frames(draw):
    """A frame, possibly damaged."""
    raw = bytearray(bytes(draw(valid_frame())))
    how = draw(st.sampled_from(["none", "none", "none", "truncate", "flip", "flip", "length"]))
    if how == "truncate":
        # A device never delivers less than an Ethernet header (test runs refuse it too).
        raw = raw[: draw(st.integers(14, len(raw)))]
    elif how == "flip" and raw:
        for _ in range(draw(st.integers(1, 3))):
            pos = draw(st.integers(0, min(len(raw), 140) - 1))
            raw[pos] = draw(st.integers(0, 255))
    elif how == "length" and len(raw) > 40:
        # Overwrite one of the length fields the parsers read (outer/inner IP, UDP).
        pos = draw(st.sampled_from([16, 38, 66, 68, 82, 86, 18 + 0]))
        if pos + 2 <= len(raw):
            raw[pos : pos + 2] = draw(st.integers(0, 65535)).to_bytes(2, "big")
    return bytes(raw)
