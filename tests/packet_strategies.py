"""Hypothesis strategies for frames the gateway may see: valid ones of every kind (untagged,
802.1Q, 802.1ad/QinQ, inner VLAN tags, chained IPv6 extension headers, ICMP errors with quotes,
jumbo frames that BPF_PROG_TEST_RUN builds as multi-buffer xdp_buffs), then random mutations
(truncation at any offset, also under 14 bytes; flipped bytes anywhere in the headers; wrong
lengths)."""

from __future__ import annotations

from hypothesis import strategies as st
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6DestUnreach,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    ICMPv6PacketTooBig,
    IPv6,
    IPv6ExtHdrDestOpt,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
)
from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether
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


# Beyond a page (4096 - 256 headroom - 320 tailroom) the test run puts the rest in fragments.
MULTI_BUFFER = 3600
EXTS = [IPv6ExtHdrHopByHop, IPv6ExtHdrDestOpt, IPv6ExtHdrRouting, IPv6ExtHdrFragment]


def payload(draw) -> Raw:
    """Mostly small; sometimes a jumbo frame that the test run builds as multi-buffer."""
    if draw(st.integers(0, 9)) == 0:
        return Raw(b"j" * draw(st.integers(MULTI_BUFFER, 8900)))
    return Raw(b"p" * draw(st.integers(0, 120)))


def ext_chain(draw, ip):
    """None, one or a chain of up to four IPv6 extension headers."""
    for _ in range(draw(st.sampled_from([0] * 6 + [1, 2, 4]))):
        ip = ip / draw(st.sampled_from(EXTS))()
    return ip


def icmp_error(draw, six, src, dst, quoted_src, quoted_dst):
    """An ICMP error quoting a packet between quoted_src and quoted_dst (maybe cut short)."""
    if six:
        quote = bytes(IPv6(src=quoted_src, dst=quoted_dst) / UDP(sport=9000, dport=40001) / PAYLOAD)
        icmp = draw(st.sampled_from([ICMPv6PacketTooBig(mtu=1280), ICMPv6DestUnreach(code=4)]))
        ip = IPv6(src=src, dst=dst)
    else:
        quote = bytes(IP(src=quoted_src, dst=quoted_dst) / TCP(sport=80, dport=40000) / PAYLOAD)
        icmp = draw(st.sampled_from([ICMP(type=3, code=4, nexthopmtu=1400), ICMP(type=11)]))
        ip = IP(src=src, dst=dst)
    return ip / icmp / Raw(quote[: draw(st.sampled_from([len(quote), 28, 48, 19, 39]))])


def outer_tags(draw, eth):
    """Untagged, one 802.1Q tag, or 802.1ad + 802.1Q (QinQ)."""
    kind = draw(st.sampled_from(["none"] * 8 + ["q", "qinq"]))
    if kind == "q":
        return eth / Dot1Q(vlan=draw(st.integers(1, 4094)))
    if kind == "qinq":
        outer, inner = draw(st.integers(1, 4094)), draw(st.integers(1, 4094))
        return eth / Dot1AD(vlan=outer) / Dot1Q(vlan=inner)
    return eth


PAIRS = [(1001, "10.1.0.1"), (1001, "10.1.0.2"), (1002, "10.1.0.1"), (1003, "10.1.0.3")]
SRC_OF = {1001: ["192.168.1.10", "192.168.77.1"], 1002: ["192.168.1.10"], 1003: ["10.200.0.5"]}


@st.composite
def inner_packet(draw, vni=None):
    six = draw(st.booleans())
    data = payload(draw)
    if draw(st.integers(0, 11)) == 0:
        # a host's ICMP error about a reply: the quote's destination is the host (or not)
        src = draw(st.sampled_from(SRC6 if six else SRC_OF.get(vni, SRC4)))
        dst = draw(st.sampled_from(DST6 if six else DST4))
        qdst = draw(st.sampled_from([src, src, *(SRC6 if six else SRC4)]))
        return icmp_error(draw, six, src, dst, dst, qdst)
    if six:
        ip = IPv6(
            src=draw(st.sampled_from(SRC6)),
            dst=draw(st.sampled_from(DST6)),
            hlim=draw(st.one_of(st.integers(0, 3), *[st.integers(4, 255)] * 4)),
        )
        return ext_chain(draw, ip) / l4(draw, True) / data
    if draw(st.integers(0, 15)) == 0:
        return ARP(psrc="192.168.1.10", pdst="192.168.0.1")
    srcs = SRC_OF.get(vni, SRC4) if draw(st.integers(0, 3)) else SRC4
    ip = ipv4(draw, draw(st.sampled_from(srcs)), draw(st.sampled_from(DST4)))
    proto = l4(draw, False)
    if isinstance(proto, Raw):
        ip.proto = 47
    return ip / proto / data


@st.composite
def valid_frame(draw):
    kind = draw(st.sampled_from(["vxlan", "vxlan", "vxlan", "reply", "reply", "other"]))
    eth = Ether(src="02:00:00:00:99:01", dst=draw(st.sampled_from([COMPUTE_MAC, STORAGE_MAC])))
    eth = outer_tags(draw, eth)
    if kind == "vxlan":
        if draw(st.integers(0, 3)):
            vni, vtep = draw(st.sampled_from(PAIRS))
        else:
            vni, vtep = draw(st.sampled_from(VNIS)), draw(st.sampled_from(VTEPS))
        flags = draw(st.sampled_from([0x08] * 6 + [0x0C, 0x00, 0xFF]))
        outer = IP(src=vtep, dst=GW_VTEP, id=0)
        inner_eth = Ether(dst=ROUTER.get(vni, "02:00:00:00:aa:01"))
        if draw(st.integers(0, 9)) == 0:
            inner_eth = inner_eth / Dot1Q(vlan=draw(st.integers(1, 4094)))  # inner VLAN tag
        return (
            eth
            / outer
            / UDP(sport=draw(st.integers(1024, 65535)), dport=4789)
            / VXLAN(flags=flags, vni=vni)
            / inner_eth
            / draw(inner_packet(vni))
        )
    if kind == "reply":
        dst = draw(st.sampled_from(REPLY_DST))
        six = ":" in dst
        if draw(st.integers(0, 7)) == 0:
            # an ICMP error from storage: the quote's source is the destination (or not)
            qsrc = draw(st.sampled_from([dst, dst, *[d for d in REPLY_DST if (":" in d) == six]]))
            src = draw(st.sampled_from(DST6 if six else DST4))
            return eth / icmp_error(draw, six, src, dst, qsrc, src)
        if six:
            ip = IPv6(
                src=draw(st.sampled_from(DST6)),
                dst=dst,
                hlim=draw(st.one_of(st.integers(0, 3), *[st.integers(4, 255)] * 4)),
                tc=draw(st.sampled_from([0, 0xB8])),
            )
            return eth / ext_chain(draw, ip) / l4(draw, True) / payload(draw)
        ip = ipv4(draw, draw(st.sampled_from(DST4)), dst)
        proto = l4(draw, False)
        if isinstance(proto, Raw):
            ip.proto = 47
        return eth / ip / proto / payload(draw)
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
    how = draw(
        st.sampled_from(["none", "none", "none", "truncate", "runt", "flip", "flip", "length"])
    )
    if how == "truncate":
        raw = raw[: draw(st.integers(14, len(raw)))]
    elif how == "runt":
        # Under an Ethernet header: a device drops it before XDP, the test run refuses it.
        raw = raw[: draw(st.integers(0, 13))]
    elif how == "flip" and raw:
        # Anywhere in the headers: outer, tags, VXLAN, inner, extension headers, ICMP quotes
        # all sit within the first 200 bytes; one flip in a while lands anywhere at all.
        for _ in range(draw(st.integers(1, 4))):
            end = len(raw) if draw(st.integers(0, 7)) == 0 else min(len(raw), 200)
            pos = draw(st.integers(0, end - 1))
            raw[pos] = draw(st.integers(0, 255))
    elif how == "length" and len(raw) > 40:
        # Overwrite one of the length fields the parsers read (outer/inner IP, UDP).
        pos = draw(st.sampled_from([16, 38, 66, 68, 82, 86, 18 + 0]))
        if pos + 2 <= len(raw):
            raw[pos : pos + 2] = draw(st.integers(0, 65535)).to_bytes(2, "big")
    return bytes(raw)
