"""Reference model of the XDP gateway: the executable specification of `bpf/xdp_gateway.c`.

`process(frame, tables, ingress_ifindex)` returns the verdict, the reason, the egress port and the
output bytes that the kernel program must produce for the same tables. Each step names the C
function it mirrors; the fixture and property tests run both and compare everything. Checksum
arithmetic, the L4 header and ICMP quotes (`csum.h`, `l4.h`) are in `model_l4.py`; the traffic
policy's soft state and marking (`policy.h`), with the clock, in `model_policy.py`.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

from crosszone.abi import layout
from crosszone.abi.reasons import Reason, XdpAction
from crosszone.compile.tables import HostEntry, Nexthop, Port, Route, StorageFacing, Tables, Vpc
from crosszone.fastpath.testing.model_l4 import (
    IPPROTO_ICMPV6,
    IPPROTO_UDP,
    QuoteError,
    csum_replace,
    ipv4_csum,
    l4_fix,
    l4_parse,
    quote_fix,
    quote_parse,
    tcp_bare,
)
from crosszone.fastpath.testing.model_policy import (
    DIR_TO_COMPUTE,
    DIR_TO_STORAGE,
    Mark,
    PolicyState,
    RateDrop,
    mark4,
    mark6,
    policy,
)

ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_8021Q = 0x8100
IPV6_EXTHDRS = frozenset({0, 43, 44, 50, 51, 60, 135, 139, 140, 253, 254})
OUTER_L4 = 20 + 8 + 8  # outer IPv4 + UDP + VXLAN (CZ_OUTER_L4)
ENCAP_HLEN = 14 + OUTER_L4 + 14  # CZ_ENCAP_HLEN


@dataclass(frozen=True)
class Result:
    """What the fast path does with one frame."""

    action: XdpAction
    reason: Reason
    port: int | None
    vpc_id: int | None
    data: bytes


# -- hash.h ------------------------------------------------------------------------------------
M64 = (1 << 64) - 1
_SEED, _K1, _K2 = 0x63727A3163727A31, 0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F
_K3, _K4, _K5, _K6 = 0x165667B19E3779F9, 0xD6E8FEB86659FD93, 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53


def _final(x: int) -> int:
    x ^= x >> 32
    return ((x * _K4) & M64) >> 32


def flow_hash(src: bytes, dst: bytes, ports: bytes, proto: int) -> int:
    """cz_flow_hash4/6: words are the raw bytes loaded little-endian, as on the BPF side (x86)."""
    p = int.from_bytes(ports, "little") << 32
    if len(src) == 4:
        a = ((int.from_bytes(src, "little") << 32) | int.from_bytes(dst, "little")) ^ _SEED
        return _final(((a * _K1) & M64) ^ (((p | proto) * _K2) & M64))
    s0 = int.from_bytes(src[:8], "little") ^ _SEED
    s1, d0, d1 = (int.from_bytes(x, "little") for x in (src[8:], dst[:8], dst[8:]))
    x = (s0 * _K1) ^ (s1 * _K3) ^ (d0 * _K5) ^ (d1 * _K6) ^ ((p | proto | 6 << 8) * _K2)
    return _final(x & M64)


# -- table lookups -----------------------------------------------------------------------------
class _Index:
    """Dictionaries over Tables, built once per Tables object."""

    def __init__(self, t: Tables) -> None:
        self.vpc_by_vni: dict[int, Vpc] = {v.vni: v for v in t.vpcs}
        self.vteps = {(vni, vtep.packed) for vni, vtep in t.vteps}
        self.routes: dict[tuple[int, int, int, int], Route] = {
            (r.vpc_id, r.prefix.version, r.prefix.prefixlen, int(r.prefix.network_address)): r
            for r in t.routes
        }
        self.groups = {g.group_id: g for g in t.groups}
        self.nexthops: dict[int, Nexthop] = {n.nh_id: n for n in t.nexthops}
        self.ports: dict[int, Port] = {p.index: p for p in t.ports}
        self.sf = sorted(t.storage_facing, key=lambda s: -s.prefix.prefixlen)
        self.hosts: dict[tuple[int, int, int], HostEntry] = {
            (h.vpc_id, h.addr.version, int(h.addr)): h for h in t.hosts
        }


def _index(t: Tables) -> _Index:
    idx = t._index.get("model")
    if idx is None:
        idx = t._index["model"] = _Index(t)
    return idx


def _route(idx: _Index, vpc: Vpc, dst: bytes) -> Route | None:
    """cz_route4/cz_route6: one exact lookup per prefix length in use, longest first."""
    bits = len(dst) * 8
    addr = int.from_bytes(dst, "big")
    for plen in vpc.plens4 if bits == 32 else vpc.plens6:
        masked = addr & (((1 << plen) - 1) << (bits - plen)) if plen else 0
        r = idx.routes.get((vpc.vpc_id, 4 if bits == 32 else 6, plen, masked))
        if r is not None:
            return r
    return None


def _next_hop(
    p: _Packet, vpc: Vpc, src: bytes, dst: bytes, ports: bytes, proto: int, length: int,
    bare: bool = False,
) -> tuple[Nexthop, Port, Mark]:
    """Route, action (cz_route_forwards), the policy (rate, mark, flowlet) and ECMP member, or
    the verdict that stops the packet."""
    r = _route(p.idx, vpc, dst)
    if r is None:
        raise _drop(Reason.DROP_ROUTE_MISS)
    if r.action == layout.CZ_ACT_BLACKHOLE:
        raise _drop(Reason.DROP_ROUTE_BLACKHOLE)
    if r.action != layout.CZ_ACT_FORWARD:
        raise _pass(Reason.PASS_ROUTE_SLOWPATH)
    h = flow_hash(src, dst, ports, proto)
    m = p.policy(vpc, vpc.vpc_id, DIR_TO_STORAGE, (proto, len(src), src, dst, ports), h, length,
                 bare)
    picked = _ecmp(p.idx, r.group, m.hash(h))
    if picked is None:
        raise _drop(Reason.DROP_NO_NEXTHOP)
    return picked[0], picked[1], m


def _ecmp(idx: _Index, group: int, h: int) -> tuple[Nexthop, Port] | None:
    """cz_ecmp_pick."""
    g = idx.groups.get(group)
    if g is None or not g.members:
        return None
    nh = idx.nexthops.get(g.buckets[h & (layout.CZ_ECMP_BUCKETS - 1)])
    if nh is None:
        return None
    port = idx.ports.get(nh.port)
    if port is None or not port.ifindex:
        return None
    return nh, port


def _translate(
    addr: bytes,
    mask_net: ipaddress.IPv4Network | ipaddress.IPv6Network,
    into: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> bytes:
    """(addr & ~mask) | into.prefix, for a prefix of the same length."""
    bits = len(addr) * 8
    host = int.from_bytes(addr, "big") & ((1 << (bits - mask_net.prefixlen)) - 1)
    return (int(into.network_address) | host).to_bytes(len(addr), "big")


class _Verdict(Exception):
    def __init__(self, action: XdpAction, reason: Reason) -> None:
        self.action = action
        self.reason = reason


def _pass(reason: Reason) -> _Verdict:
    return _Verdict(XdpAction.PASS, reason)


def _drop(reason: Reason) -> _Verdict:
    return _Verdict(XdpAction.DROP, reason)


class _Packet:
    """One frame being processed, with the verdict fields of struct cz_verdict."""

    def __init__(self, frame: bytes, tables: Tables, ingress_ifindex: int,
                 state: PolicyState) -> None:
        self.st = state
        self.pkt = bytearray(frame)
        self.orig = bytes(frame)
        self.t = tables
        self.idx = _index(tables)
        self.ingress = ingress_ifindex
        self.port: int | None = None
        self.vpc_id: int | None = None

    def policy(self, vpc: Vpc | None, vpc_id: int, direction: int, key: tuple, h: int,
               length: int, bare: bool = False) -> Mark:
        """cz_policy, with its drop as a verdict."""
        try:
            return policy(self.st, self.t, vpc, vpc_id, direction, key, h, length, bare)
        except RateDrop:
            raise _drop(Reason.DROP_VPC_RATE) from None

    def rated_vpc(self, vpc_id: int) -> Vpc | None:
        """cz_rated_vpc: the VPC record replies read, only when some VPC has a rate."""
        if not self.t.flags & layout.CZ_CFG_RATES:
            return None
        return next((v for v in self.t.vpcs if v.vpc_id == vpc_id), None)

    def send(self, port: Port, reason: Reason) -> _Verdict:
        """cz_send."""
        self.port = port.index
        if port.ifindex == self.ingress:
            return _Verdict(XdpAction.TX, reason)
        return _Verdict(XdpAction.REDIRECT, reason)


# -- to_storage.h ------------------------------------------------------------------------------
def _inner4(p: _Packet, vpc: Vpc, off: int, avail: int) -> _Verdict:
    pkt = p.pkt
    if avail < 20 or off + 20 > len(pkt):
        raise _drop(Reason.DROP_INNER_MALFORMED)
    ver, ihl = pkt[off] >> 4, pkt[off] & 0xF
    if ver != 4 or ihl < 5:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    if ihl > 5:
        raise _pass(Reason.PASS_IPV4_OPTIONS)
    tot = int.from_bytes(pkt[off + 2 : off + 4], "big")
    if tot < 20 or tot > avail:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    if int.from_bytes(pkt[off + 6 : off + 8], "big") & 0x3FFF:
        raise _pass(Reason.PASS_IPV4_FRAGMENT)
    if pkt[off + 8] <= 1:
        raise _pass(Reason.PASS_TTL_EXCEEDED)
    src, dst = bytes(pkt[off + 12 : off + 16]), bytes(pkt[off + 16 : off + 20])
    if vpc.prefix4 is None or ipaddress.IPv4Address(src) not in vpc.prefix4:
        raise _drop(Reason.DROP_SRC_NOT_IN_VPC)
    proto = pkt[off + 9]
    l4 = l4_parse(pkt, off + 20, proto, tot - 20, False)
    if l4 is None:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    quote = _quote(pkt, off + 20, proto, tot - 20, False, True, src) if not vpc.identity else None
    nh, port, m = _next_hop(p, vpc, src, dst, l4[1], proto, tot,
                            tcp_bare(pkt, off + 20, proto, tot - 20))
    check = int.from_bytes(pkt[off + 10 : off + 12], "big")
    if not vpc.identity:
        assert vpc.sf4 is not None
        new = _translate(src, vpc.prefix4, vpc.sf4)
        l4_fix(pkt, l4, src, new)
        quote_fix(pkt, quote, True, src, new)
        check = csum_replace(check, src, new)
        pkt[off + 12 : off + 16] = new
    pkt[off + 10 : off + 12] = check.to_bytes(2, "big")
    if m.on:
        mark4(pkt, off, m.dscp)
    check = int.from_bytes(pkt[off + 10 : off + 12], "big")
    old = bytes(pkt[off + 8 : off + 10])
    pkt[off + 8] -= 1
    check = csum_replace(check, old, bytes(pkt[off + 8 : off + 10]))
    pkt[off + 10 : off + 12] = check.to_bytes(2, "big")
    return _decap(p, off - 14, nh, port)


def _inner6(p: _Packet, vpc: Vpc, off: int, avail: int) -> _Verdict:
    pkt = p.pkt
    if avail < 40 or off + 40 > len(pkt):
        raise _drop(Reason.DROP_INNER_MALFORMED)
    if pkt[off] >> 4 != 6:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    plen = int.from_bytes(pkt[off + 4 : off + 6], "big")
    if plen + 40 > avail:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    nexthdr = pkt[off + 6]
    if nexthdr in IPV6_EXTHDRS:
        raise _pass(Reason.PASS_IPV6_EXTHDR)
    if (
        nexthdr == IPPROTO_ICMPV6
        and plen >= 1
        and off + 41 <= len(pkt)
        and 133 <= pkt[off + 40] <= 137
    ):
        raise _pass(Reason.PASS_INNER_ND)
    if pkt[off + 7] <= 1:
        raise _pass(Reason.PASS_TTL_EXCEEDED)
    src, dst = bytes(pkt[off + 8 : off + 24]), bytes(pkt[off + 24 : off + 40])
    if vpc.prefix6 is None or ipaddress.IPv6Address(src) not in vpc.prefix6:
        raise _drop(Reason.DROP_SRC_NOT_IN_VPC)
    l4 = l4_parse(pkt, off + 40, nexthdr, plen, True)
    if l4 is None:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    quote = _quote(pkt, off + 40, nexthdr, plen, True, True, src) if not vpc.identity else None
    nh, port, m = _next_hop(p, vpc, src, dst, l4[1], nexthdr, plen + 40,
                            tcp_bare(pkt, off + 40, nexthdr, plen))
    if not vpc.identity:
        assert vpc.sf6 is not None
        new = _translate(src, vpc.prefix6, vpc.sf6)
        l4_fix(pkt, l4, src, new)
        quote_fix(pkt, quote, True, src, new)
        pkt[off + 8 : off + 24] = new
    if m.on:
        mark6(pkt, off, m.dscp)
    pkt[off + 7] -= 1
    return _decap(p, off - 14, nh, port)


def _decap(p: _Packet, inner_eth: int, nh: Nexthop, port: Port) -> _Verdict:
    """cz_decap + cz_send: drop the outer headers, set the MACs."""
    del p.pkt[:inner_eth]
    p.pkt[0:6] = nh.mac
    p.pkt[6:12] = port.mac
    return p.send(port, Reason.FWD_TO_STORAGE)


def _from_compute(p: _Packet, l3: int) -> _Verdict:
    pkt, n = p.pkt, len(p.pkt)
    ver, ihl = pkt[l3] >> 4, pkt[l3] & 0xF
    if ver != 4 or ihl < 5:
        raise _pass(Reason.PASS_OUTER_MALFORMED)
    if pkt[l3 + 9] != IPPROTO_UDP:
        raise _pass(Reason.PASS_TO_GATEWAY)
    if int.from_bytes(pkt[l3 + 6 : l3 + 8], "big") & 0x3FFF:
        raise _pass(Reason.PASS_OUTER_FRAGMENT)
    if ihl > 5:
        raise _pass(Reason.PASS_OUTER_OPTIONS)
    udp = l3 + 20
    if udp + 8 > n:
        raise _pass(Reason.PASS_OUTER_MALFORMED)
    if int.from_bytes(pkt[udp + 2 : udp + 4], "big") != layout.CZ_VXLAN_PORT:
        raise _pass(Reason.PASS_TO_GATEWAY)
    tot = int.from_bytes(pkt[l3 + 2 : l3 + 4], "big")
    if (
        tot < OUTER_L4 + 14
        or tot > n - l3
        or int.from_bytes(pkt[udp + 4 : udp + 6], "big") != tot - 20
    ):
        raise _drop(Reason.DROP_VXLAN_MALFORMED)
    vx = udp + 8
    if vx + 8 + 14 > n:
        raise _drop(Reason.DROP_VXLAN_MALFORMED)
    if not pkt[vx] & 0x08:
        raise _drop(Reason.DROP_VXLAN_FLAGS)
    vni = int.from_bytes(pkt[vx + 4 : vx + 7], "big")
    vpc = p.idx.vpc_by_vni.get(vni)
    if vpc is None:
        raise _drop(Reason.DROP_UNKNOWN_VNI)
    p.vpc_id = vpc.vpc_id
    if (vni, bytes(pkt[l3 + 12 : l3 + 16])) not in p.idx.vteps:
        raise _drop(Reason.DROP_VTEP_NOT_ALLOWED)
    itype = int.from_bytes(pkt[vx + 20 : vx + 22], "big")
    inner, avail = l3 + OUTER_L4 + 14, tot - OUTER_L4 - 14
    if itype == ETH_P_IP:
        return _inner4(p, vpc, inner, avail)
    if itype == ETH_P_IPV6:
        return _inner6(p, vpc, inner, avail)
    raise _pass(Reason.PASS_INNER_NOT_IP)


# -- to_compute.h ------------------------------------------------------------------------------
def _encap(
    p: _Packet,
    l3: int,
    sf: StorageFacing,
    host: HostEntry,
    port: Port,
    h: int,
    inner_type: int,
    tos: int,
) -> _Verdict:
    """cz_encap + cz_send."""
    inner = bytes(p.pkt[l3:])
    tot = OUTER_L4 + 14 + len(inner)
    ip = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            tos,
            tot,
            0,
            0x4000,
            layout.CZ_OUTER_TTL,
            IPPROTO_UDP,
            0,
            p.t.vtep.packed,
            host.vtep.packed,
        )
    )
    ip[10:12] = ipv4_csum(bytes(ip)).to_bytes(2, "big")
    sport = layout.CZ_SPORT_BASE | (h & layout.CZ_SPORT_MASK)
    udp = struct.pack("!HHHH", sport, layout.CZ_VXLAN_PORT, tot - 20, 0)
    vxlan = bytes([0x08, 0, 0, 0]) + sf.vni.to_bytes(3, "big") + b"\0"
    eth = port.next_hop_mac + port.mac + ETH_P_IP.to_bytes(2, "big")
    ieth = host.mac + sf.router_mac + inner_type.to_bytes(2, "big")
    p.pkt = bytearray(eth + bytes(ip) + udp + vxlan + ieth + inner)
    return p.send(port, Reason.FWD_TO_COMPUTE)


def _compute_port(p: _Packet) -> Port:
    """cz_reply_port: the compute port, which a reply must not arrive on."""
    port = p.idx.ports.get(p.t.compute_port)
    if port is None or not port.ifindex:
        raise _drop(Reason.DROP_NO_NEXTHOP)
    if port.ifindex == p.ingress:
        raise _drop(Reason.DROP_REPLY_WRONG_PORT)
    return port


def _quote(
    pkt: bytearray, off: int, proto: int, avail: int, ipv6: bool, dst_side: bool, expect: bytes
) -> int | None:
    """cz_quote_parse with its verdict."""
    try:
        return quote_parse(pkt, off, proto, avail, ipv6, dst_side, expect)
    except QuoteError:
        raise _drop(Reason.DROP_ICMP_QUOTE) from None


def _reply4(p: _Packet, sf: StorageFacing, l3: int) -> _Verdict:
    pkt, n = p.pkt, len(p.pkt)
    p.vpc_id = sf.vpc_id
    port = _compute_port(p)
    ver, ihl = pkt[l3] >> 4, pkt[l3] & 0xF
    if ver != 4 or ihl < 5:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    if ihl > 5:
        raise _pass(Reason.PASS_IPV4_OPTIONS)
    tot = int.from_bytes(pkt[l3 + 2 : l3 + 4], "big")
    if tot < 20 or tot > n - l3:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    if int.from_bytes(pkt[l3 + 6 : l3 + 8], "big") & 0x3FFF:
        raise _pass(Reason.PASS_IPV4_FRAGMENT)
    if pkt[l3 + 8] <= 1:
        raise _pass(Reason.PASS_TTL_EXCEEDED)
    proto = pkt[l3 + 9]
    l4 = l4_parse(pkt, l3 + 20, proto, tot - 20, False)
    if l4 is None:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    src, dst = bytes(pkt[l3 + 12 : l3 + 16]), bytes(pkt[l3 + 16 : l3 + 20])
    new = _translate(dst, sf.prefix, sf.vpc_prefix)
    quote = _quote(pkt, l3 + 20, proto, tot - 20, False, False, dst) if not sf.identity else None
    host = p.idx.hosts.get((sf.vpc_id, 4, int.from_bytes(new, "big")))
    if host is None:
        raise _drop(Reason.DROP_HOST_UNKNOWN)
    h = flow_hash(src, dst, l4[1], proto)
    m = p.policy(p.rated_vpc(sf.vpc_id), sf.vpc_id, DIR_TO_COMPUTE, (proto, 4, src, dst, l4[1]),
                 h, tot, tcp_bare(pkt, l3 + 20, proto, tot - 20))
    if m.on:
        mark4(pkt, l3, m.dscp)
    h = m.hash(h)
    check = int.from_bytes(pkt[l3 + 10 : l3 + 12], "big")
    if not sf.identity:
        l4_fix(pkt, l4, dst, new)
        quote_fix(pkt, quote, False, dst, new)
        check = csum_replace(check, dst, new)
        pkt[l3 + 16 : l3 + 20] = new
    old = bytes(pkt[l3 + 8 : l3 + 10])
    pkt[l3 + 8] -= 1
    check = csum_replace(check, old, bytes(pkt[l3 + 8 : l3 + 10]))
    pkt[l3 + 10 : l3 + 12] = check.to_bytes(2, "big")
    return _encap(p, l3, sf, host, port, h, ETH_P_IP, pkt[l3 + 1])


def _reply6(p: _Packet, sf: StorageFacing, l3: int) -> _Verdict:
    pkt, n = p.pkt, len(p.pkt)
    p.vpc_id = sf.vpc_id
    port = _compute_port(p)
    if pkt[l3] >> 4 != 6:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    plen = int.from_bytes(pkt[l3 + 4 : l3 + 6], "big")
    if plen + 40 > n - l3:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    nexthdr = pkt[l3 + 6]
    if nexthdr in IPV6_EXTHDRS:
        raise _pass(Reason.PASS_IPV6_EXTHDR)
    if pkt[l3 + 7] <= 1:
        raise _pass(Reason.PASS_TTL_EXCEEDED)
    l4 = l4_parse(pkt, l3 + 40, nexthdr, plen, True)
    if l4 is None:
        raise _drop(Reason.DROP_INNER_MALFORMED)
    src, dst = bytes(pkt[l3 + 8 : l3 + 24]), bytes(pkt[l3 + 24 : l3 + 40])
    new = _translate(dst, sf.prefix, sf.vpc_prefix)
    quote = _quote(pkt, l3 + 40, nexthdr, plen, True, False, dst) if not sf.identity else None
    host = p.idx.hosts.get((sf.vpc_id, 6, int.from_bytes(new, "big")))
    if host is None:
        raise _drop(Reason.DROP_HOST_UNKNOWN)
    h = flow_hash(src, dst, l4[1], nexthdr)
    m = p.policy(p.rated_vpc(sf.vpc_id), sf.vpc_id, DIR_TO_COMPUTE,
                 (nexthdr, 16, src, dst, l4[1]), h, plen + 40,
                 tcp_bare(pkt, l3 + 40, nexthdr, plen))
    if m.on:
        mark6(pkt, l3, m.dscp)
    h = m.hash(h)
    tc = ((pkt[l3] & 0xF) << 4) | (pkt[l3 + 1] >> 4)
    if not sf.identity:
        l4_fix(pkt, l4, dst, new)
        quote_fix(pkt, quote, False, dst, new)
        pkt[l3 + 24 : l3 + 40] = new
    pkt[l3 + 7] -= 1
    return _encap(p, l3, sf, host, port, h, ETH_P_IPV6, tc)


def _storage_facing(p: _Packet, dst: bytes) -> StorageFacing | None:
    addr = ipaddress.ip_address(dst)
    for sf in p.idx.sf:
        if sf.prefix.version == addr.version and addr in sf.prefix:
            return sf
    return None


# -- xdp_gateway.c -----------------------------------------------------------------------------
def _classify(p: _Packet) -> _Verdict:
    pkt, n = p.pkt, len(p.pkt)
    if n < 14:
        raise _pass(Reason.PASS_OUTER_MALFORMED)
    proto, l3 = int.from_bytes(pkt[12:14], "big"), 14
    if proto == ETH_P_8021Q:
        if n < 18:
            raise _pass(Reason.PASS_OUTER_MALFORMED)
        proto, l3 = int.from_bytes(pkt[16:18], "big"), 18
    if proto == ETH_P_IP:
        if l3 + 20 > n:
            raise _pass(Reason.PASS_OUTER_MALFORMED)
        dst = bytes(pkt[l3 + 16 : l3 + 20])
        if int(p.t.vtep) and dst == p.t.vtep.packed:
            return _from_compute(p, l3)
        sf = _storage_facing(p, dst)
        if sf is not None:
            return _reply4(p, sf, l3)
        raise _pass(Reason.PASS_NOT_OURS)
    if proto == ETH_P_IPV6:
        if l3 + 40 > n:
            raise _pass(Reason.PASS_OUTER_MALFORMED)
        sf = _storage_facing(p, bytes(pkt[l3 + 24 : l3 + 40]))
        if sf is not None:
            return _reply6(p, sf, l3)
        raise _pass(Reason.PASS_NOT_OURS)
    raise _pass(Reason.PASS_NOT_IP)


def process(frame: bytes, tables: Tables, ingress_ifindex: int = 0,
            state: PolicyState | None = None) -> Result:
    """Run one frame through the model: verdict, reason, egress port, VPC and output bytes.

    state is the traffic policy's soft state and clock, updated in place (a fresh one at time 0
    when not given)."""
    p = _Packet(frame, tables, ingress_ifindex, state if state is not None else PolicyState())
    try:
        v = _classify(p)
    except _Verdict as stop:
        v = stop
    forwarded = v.action in (XdpAction.TX, XdpAction.REDIRECT)
    # Stages rewrite only after their last check, so a frame that is not forwarded is unchanged.
    data = bytes(p.pkt) if forwarded else p.orig
    return Result(v.action, v.reason, p.port if forwarded else None, p.vpc_id, data)
