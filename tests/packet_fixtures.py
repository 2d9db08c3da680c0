"""The fast path's fixture table: description, input frame, tables, expected verdict, reason and
output bytes. The same rows run through the kernel program (tests/fastpath/test_fixtures.py) and
through the reference model (tests/unit/test_model_fixtures.py).

Expected frames are built independently with scapy, which computes every checksum from scratch:
a byte-for-byte match therefore also proves that the program's incremental checksum updates are
right. Only two things are taken from the specification instead of being re-derived here: which
ECMP member a flow hashes to and the VXLAN source port, both from `model.flow_hash`, whose
agreement with the C hash is tested separately.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    ICMPv6ND_NS,
    ICMPv6ND_RS,
    IPv6,
    IPv6ExtHdrHopByHop,
)
from scapy.layers.l2 import ARP, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet, Raw

from crosszone.abi.reasons import Reason, XdpAction
from crosszone.compile.tables import Tables, compile_tables
from crosszone.fastpath.testing.model import flow_hash
from crosszone.intent.cluster import load_cluster

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "gateway.yaml"
GW_VTEP = "10.0.0.100"
COMPUTE_MAC, COMPUTE_NH = "02:00:00:00:10:01", "02:00:00:00:10:fe"
STORAGE_MAC = "02:00:00:00:20:01"
HOST_A1 = dict(vtep="10.1.0.1", ip="192.168.1.10", ip6="fd00:a::10", mac="02:00:00:01:00:01")
HOST_B1 = dict(vtep="10.1.0.1", ip="192.168.1.10", mac="02:00:00:02:00:01")
HOST_C1 = dict(vtep="10.1.0.3", ip="10.200.0.5", mac="02:00:00:03:00:01")
ROUTER = {1001: "02:00:00:00:aa:01", 1002: "02:00:00:00:bb:01", 1003: "02:00:00:00:cc:01"}
SF = {1001: ("192.168.0.0/16", "100.64.0.0/16"), 1002: ("192.168.0.0/16", "100.65.0.0/16")}
SF6 = {1001: ("fd00:a::/64", "fd64:a::/64")}
PAYLOAD = Raw(b"crosszone fixture payload " * 4)


@cache
def tables() -> Tables:
    """The example intent's tables (ports unbound: the runners bind them)."""
    return compile_tables(load_cluster(EXAMPLE), "gw-a")


def translate(addr: str, vni: int, back: bool = False) -> str:
    """Map an address between a VPC prefix and its storage-facing prefix."""
    a = ipaddress.ip_address(addr)
    own, sf = (SF if a.version == 4 else SF6)[vni]
    src, dst = (
        (ipaddress.ip_network(sf), ipaddress.ip_network(own))
        if back
        else (ipaddress.ip_network(own), ipaddress.ip_network(sf))
    )
    host = int(a) & int(src.hostmask)
    return str(ipaddress.ip_address(int(dst.network_address) | host))


def _ports(l4: Packet | None) -> bytes:
    if l4 is None or not isinstance(l4, (TCP, UDP)):
        return b"\0\0\0\0"
    return bytes(l4)[:4]


def _l3(inner: Packet) -> Packet:
    return inner[IP] if IP in inner else inner[IPv6]


def _l4(inner: Packet) -> Packet | None:
    for cls in (TCP, UDP):
        if cls in inner:
            return inner[cls]
    return None


def _hash(inner: Packet) -> int:
    ip = _l3(inner)
    fam = 4 if isinstance(ip, IP) else 6
    src = ipaddress.ip_address(ip.src).packed
    dst = ipaddress.ip_address(ip.dst).packed
    return flow_hash(src, dst, _ports(_l4(inner)), ip.proto if fam == 4 else ip.nh)


def nexthop_mac(pool: str, inner: Packet) -> str:
    """The MAC of the ECMP member this inner packet's flow hashes to."""
    t = tables()
    g = next(g for g in t.groups if g.name == pool)
    nh = next(n for n in t.nexthops if n.nh_id == g.buckets[_hash(inner) & 0xFF])
    return ":".join(f"{b:02x}" for b in nh.mac)


def vxlan(
    inner: Packet,
    vni: int = 1001,
    src_vtep: str = "10.1.0.1",
    vlan: int | None = None,
    flags: int = 0x08,
    inner_src_mac: str = HOST_A1["mac"],
) -> Packet:
    """A VXLAN frame from a host VTEP to the gateway."""
    eth = Ether(src="02:00:00:00:10:fe", dst=COMPUTE_MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    return (
        eth
        / IP(src=src_vtep, dst=GW_VTEP, id=7)
        / UDP(sport=51000, dport=4789)
        / VXLAN(flags=flags, vni=vni)
        / Ether(src=inner_src_mac, dst=ROUTER.get(vni, "02:00:00:00:aa:01"))
        / inner
    )


def decapped(inner: Packet, pool: str, new_src: str | None) -> bytes:
    """What leaves toward storage: inner packet, source translated, TTL - 1, new MACs."""
    out = inner.copy()
    ip = _l3(out)
    if new_src is not None:
        ip.src = new_src
    if isinstance(ip, IP):
        ip.ttl -= 1
        del ip.chksum
    else:
        ip.hlim -= 1
    l4 = _l4(out)
    if l4 is not None and not (isinstance(l4, UDP) and l4.chksum == 0):
        del l4.chksum
    if ICMPv6EchoRequest in out:
        del out[ICMPv6EchoRequest].cksum
    return bytes(Ether(dst=nexthop_mac(pool, inner), src=STORAGE_MAC) / out)


def encapped(reply: Packet, vni: int, host: dict, new_dst: str | None) -> bytes:
    """What leaves toward compute: reply translated back, TTL - 1, in VXLAN to the host."""
    sport = 0xC000 | (_hash(reply) & 0x3FFF)
    out = _l3(reply).copy()
    ip = _l3(out)
    tos = ip.tos if isinstance(ip, IP) else ip.tc
    if new_dst is not None:
        ip.dst = new_dst
    if isinstance(ip, IP):
        ip.ttl -= 1
        del ip.chksum
    else:
        ip.hlim -= 1
    l4 = _l4(out)
    if l4 is not None and not (isinstance(l4, UDP) and l4.chksum == 0):
        del l4.chksum
    return bytes(
        Ether(dst=COMPUTE_NH, src=COMPUTE_MAC)
        / IP(src=GW_VTEP, dst=host["vtep"], id=0, flags="DF", ttl=64, tos=tos)
        / UDP(sport=sport, dport=4789, chksum=0)
        / VXLAN(flags=0x08, vni=vni)
        / Ether(dst=host["mac"], src=ROUTER[vni])
        / out
    )


def storage_reply(
    dst: str,
    src: str = "172.16.5.5",
    l4: Packet | None = None,
    vlan: int | None = None,
    **ip_kw: object,
) -> Packet:
    """A plain IP reply from the storage zone."""
    eth = Ether(src="02:00:00:00:30:01", dst=STORAGE_MAC)
    if vlan is not None:
        eth = eth / Dot1Q(vlan=vlan)
    six = ":" in dst
    ip = IPv6(src=src, dst=dst, **ip_kw) if six else IP(src=src, dst=dst, id=9, **ip_kw)
    return eth / ip / (l4 if l4 is not None else TCP(sport=80, dport=40000, flags="A")) / PAYLOAD


def _tcp4(dst: str = "172.16.5.5", src: str = HOST_A1["ip"], **kw: object) -> Packet:
    return IP(src=src, dst=dst, id=3, **kw) / TCP(sport=40000, dport=80, flags="S") / PAYLOAD


def _tcp6(dst: str = "fd10::5", src: str = HOST_A1["ip6"], **kw: object) -> Packet:
    return IPv6(src=src, dst=dst, **kw) / TCP(sport=40000, dport=80, flags="S") / PAYLOAD


@dataclass(frozen=True)
class Fixture:
    """One row: a frame in, what must come out."""

    desc: str
    frame: bytes
    action: XdpAction
    reason: Reason
    out: bytes | None = None  # None: the frame is unchanged (pass and drop)
    egress: str | None = None
    ingress: str | None = None  # intent interface the frame arrives on (XDP_TX, port checks)
    vpc: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)


def _fwd(desc: str, frame: Packet, out: bytes, egress: str, **kw: object) -> Fixture:
    action = XdpAction.TX if kw.get("ingress") == egress else XdpAction.REDIRECT
    reason = Reason.FWD_TO_STORAGE if egress == "storage0" else Reason.FWD_TO_COMPUTE
    return Fixture(desc, bytes(frame), action, reason, out, egress, **kw)  # type: ignore[arg-type]


def _pass(desc: str, frame: Packet, reason: Reason, **kw: object) -> Fixture:
    return Fixture(desc, bytes(frame), XdpAction.PASS, reason, **kw)  # type: ignore[arg-type]


def _drop(desc: str, frame: Packet, reason: Reason, **kw: object) -> Fixture:
    return Fixture(desc, bytes(frame), XdpAction.DROP, reason, **kw)  # type: ignore[arg-type]


def fixtures() -> list[Fixture]:
    """Every row of the table."""
    a_sf = translate(HOST_A1["ip"], 1001)
    a_sf6 = translate(HOST_A1["ip6"], 1001)
    udp4 = IP(src=HOST_A1["ip"], dst="172.16.7.7", id=4) / UDP(sport=40001, dport=9000) / PAYLOAD
    udp4_zero = (
        IP(src=HOST_A1["ip"], dst="172.16.7.8", id=4)
        / UDP(sport=40001, dport=9000, chksum=0)
        / PAYLOAD
    )
    icmp4 = IP(src=HOST_A1["ip"], dst="172.16.7.9", id=5) / ICMP(id=1, seq=1) / PAYLOAD
    b_pkt = _tcp4(dst="172.17.1.1")
    c_pkt = _tcp4(src=HOST_C1["ip"], dst="172.17.2.2")
    v6udp = IPv6(src=HOST_A1["ip6"], dst="fd10::77") / UDP(sport=40002, dport=9000) / PAYLOAD
    v6icmp = IPv6(src=HOST_A1["ip6"], dst="fd10::78") / ICMPv6EchoRequest(id=1, seq=2) / PAYLOAD
    jumbo = (
        IP(src=HOST_A1["ip"], dst="172.16.5.5", id=3)
        / TCP(sport=40000, dport=80)
        / Raw(b"j" * (8950 - 40))
    )
    jumbo_reply = storage_reply(a_sf) / Raw(b"r" * (8950 - 40 - len(PAYLOAD)))
    rows = [
        # compute -> storage, IPv4
        _fwd(
            "tcp to a storage pool: source translated, TTL-1, decapsulated",
            vxlan(_tcp4()),
            decapped(_tcp4(), "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "udp keeps a valid checksum after translation",
            vxlan(udp4),
            decapped(udp4, "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "udp checksum 0 stays 0",
            vxlan(udp4_zero),
            decapped(udp4_zero, "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "icmp: no pseudo-header, checksum untouched",
            vxlan(icmp4),
            decapped(icmp4, "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "outer 802.1Q tag: parsed, output untagged",
            vxlan(_tcp4(), vlan=42),
            decapped(_tcp4(), "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "VXLAN reserved bits set are ignored",
            vxlan(_tcp4(), flags=0x0C),
            decapped(_tcp4(), "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "overlapping VPC b: same inner source, its own storage-facing prefix",
            vxlan(b_pkt, vni=1002, inner_src_mac=HOST_B1["mac"]),
            decapped(b_pkt, "checkpoints", translate(HOST_A1["ip"], 1002)),
            "storage0",
            vpc="tenant-b",
        ),
        _fwd(
            "identity VPC: source unchanged",
            vxlan(c_pkt, vni=1003, src_vtep=HOST_C1["vtep"]),
            decapped(c_pkt, "checkpoints", None),
            "storage0",
            vpc="tenant-c",
        ),
        _fwd(
            "egress is the ingress port: XDP_TX",
            vxlan(_tcp4()),
            decapped(_tcp4(), "datasets", a_sf),
            "storage0",
            ingress="storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "9000-byte underlay frame (8950-byte inner packet)",
            vxlan(jumbo),
            decapped(jumbo, "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
            tags=("jumbo",),
        ),
        _drop(
            "blackhole route",
            vxlan(_tcp4(dst="172.16.99.1")),
            Reason.DROP_ROUTE_BLACKHOLE,
            vpc="tenant-a",
        ),
        _pass(
            "slow-path route",
            vxlan(_tcp4(dst="172.16.98.1")),
            Reason.PASS_ROUTE_SLOWPATH,
            vpc="tenant-a",
        ),
        _drop("no route", vxlan(_tcp4(dst="172.30.0.1")), Reason.DROP_ROUTE_MISS, vpc="tenant-a"),
        _drop(
            "VPC b has no route to VPC a's blackholed prefix either: it is not in its pools",
            vxlan(_tcp4(dst="172.18.0.1"), vni=1002),
            Reason.DROP_ROUTE_MISS,
            vpc="tenant-b",
        ),
        _drop("unknown VNI", vxlan(_tcp4(), vni=4242), Reason.DROP_UNKNOWN_VNI),
        _drop(
            "outer source is not a VTEP of the VPC",
            vxlan(_tcp4(), src_vtep="10.1.0.9"),
            Reason.DROP_VTEP_NOT_ALLOWED,
            vpc="tenant-a",
        ),
        _drop(
            "a VTEP of VPC a sending into VPC b",
            vxlan(_tcp4(), vni=1002, src_vtep="10.1.0.2"),
            Reason.DROP_VTEP_NOT_ALLOWED,
            vpc="tenant-b",
        ),
        _drop(
            "inner source outside the VPC",
            vxlan(_tcp4(src="10.9.9.9")),
            Reason.DROP_SRC_NOT_IN_VPC,
            vpc="tenant-a",
        ),
        _drop("VXLAN I flag clear", vxlan(_tcp4(), flags=0x00), Reason.DROP_VXLAN_FLAGS),
        _pass(
            "inner IPv4 options",
            vxlan(_tcp4(options=[b"\x01\x01\x01\x00"])),
            Reason.PASS_IPV4_OPTIONS,
            vpc="tenant-a",
        ),
        _pass(
            "inner first fragment (MF)",
            vxlan(_tcp4(flags="MF")),
            Reason.PASS_IPV4_FRAGMENT,
            vpc="tenant-a",
        ),
        _pass(
            "inner later fragment (offset)",
            vxlan(_tcp4(frag=10)),
            Reason.PASS_IPV4_FRAGMENT,
            vpc="tenant-a",
        ),
        _pass(
            "inner TTL 1: the kernel answers time exceeded",
            vxlan(_tcp4(ttl=1)),
            Reason.PASS_TTL_EXCEEDED,
            vpc="tenant-a",
        ),
        _pass("inner TTL 0", vxlan(_tcp4(ttl=0)), Reason.PASS_TTL_EXCEEDED, vpc="tenant-a"),
        _pass(
            "inner ARP",
            vxlan(ARP(psrc=HOST_A1["ip"], pdst="192.168.0.1")),
            Reason.PASS_INNER_NOT_IP,
            vpc="tenant-a",
        ),
        _pass(
            "UDP to the VTEP, not VXLAN (BFD)",
            Ether() / IP(src="10.1.0.1", dst=GW_VTEP) / UDP(sport=49152, dport=3784) / PAYLOAD,
            Reason.PASS_TO_GATEWAY,
        ),
        _pass(
            "TCP to the VTEP (BGP)",
            Ether() / IP(src="10.1.0.1", dst=GW_VTEP) / TCP(sport=40000, dport=179),
            Reason.PASS_TO_GATEWAY,
        ),
        _pass(
            "outer fragment",
            Ether() / IP(src="10.1.0.1", dst=GW_VTEP, flags="MF") / UDP(dport=4789) / PAYLOAD,
            Reason.PASS_OUTER_FRAGMENT,
        ),
        _pass(
            "outer IPv4 options",
            Ether()
            / IP(src="10.1.0.1", dst=GW_VTEP, options=[b"\x01\x01\x01\x00"])
            / UDP(dport=4789)
            / PAYLOAD,
            Reason.PASS_OUTER_OPTIONS,
        ),
        _pass("ARP", Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst=GW_VTEP), Reason.PASS_NOT_IP),
        _pass(
            "IP for someone else",
            Ether() / IP(src="10.1.0.1", dst="10.9.9.9") / TCP(),
            Reason.PASS_NOT_OURS,
        ),
        _pass("runt frame", Ether() / Raw(b""), Reason.PASS_NOT_IP),
        _drop(
            "VXLAN with a UDP length that disagrees with IP",
            Ether()
            / IP(src="10.1.0.1", dst=GW_VTEP)
            / UDP(dport=4789, len=60)
            / VXLAN(vni=1001)
            / Ether()
            / _tcp4(),
            Reason.DROP_VXLAN_MALFORMED,
        ),
        _drop(
            "inner TCP header cut short",
            vxlan(IP(src=HOST_A1["ip"], dst="172.16.5.5", proto=6) / Raw(b"0123456789")),
            Reason.DROP_INNER_MALFORMED,
            vpc="tenant-a",
        ),
        # compute -> storage, IPv6
        _fwd(
            "IPv6 tcp: prefix translated, hop limit - 1",
            vxlan(_tcp6()),
            decapped(_tcp6(), "datasets", a_sf6),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "IPv6 udp", vxlan(v6udp), decapped(v6udp, "datasets", a_sf6), "storage0", vpc="tenant-a"
        ),
        _fwd(
            "ICMPv6 checksum corrected (pseudo-header)",
            vxlan(v6icmp),
            decapped(v6icmp, "datasets", a_sf6),
            "storage0",
            vpc="tenant-a",
        ),
        _pass(
            "IPv6 extension header",
            vxlan(IPv6(src=HOST_A1["ip6"], dst="fd10::5") / IPv6ExtHdrHopByHop() / TCP()),
            Reason.PASS_IPV6_EXTHDR,
            vpc="tenant-a",
        ),
        _pass(
            "inner router solicitation (fe80:: -> ff02::2): the kernel's",
            vxlan(IPv6(src="fe80::1", dst="ff02::2", hlim=255) / ICMPv6ND_RS()),
            Reason.PASS_INNER_ND,
            vpc="tenant-a",
        ),
        _pass(
            "inner neighbour solicitation for the VPC router",
            vxlan(
                IPv6(src=HOST_A1["ip6"], dst="ff02::1:ff00:1", hlim=255)
                / ICMPv6ND_NS(tgt="fd00:a::1")
            ),
            Reason.PASS_INNER_ND,
            vpc="tenant-a",
        ),
        _pass("IPv6 hop limit 1", vxlan(_tcp6(hlim=1)), Reason.PASS_TTL_EXCEEDED, vpc="tenant-a"),
        _drop(
            "IPv6 from a VPC without IPv6",
            vxlan(_tcp6(), vni=1002),
            Reason.DROP_SRC_NOT_IN_VPC,
            vpc="tenant-b",
        ),
        _drop("IPv6 no route", vxlan(_tcp6(dst="fd99::1")), Reason.DROP_ROUTE_MISS, vpc="tenant-a"),
        # storage -> compute
        _fwd(
            "reply to VPC a: translated back, VXLAN to the host",
            storage_reply(a_sf),
            encapped(storage_reply(a_sf), 1001, HOST_A1, HOST_A1["ip"]),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "reply to VPC b, same inner address: VNI 1002",
            storage_reply(translate(HOST_B1["ip"], 1002)),
            encapped(storage_reply(translate(HOST_B1["ip"], 1002)), 1002, HOST_B1, HOST_B1["ip"]),
            "compute0",
            vpc="tenant-b",
        ),
        _fwd(
            "udp reply",
            storage_reply(a_sf, l4=UDP(sport=9000, dport=40001)),
            encapped(
                storage_reply(a_sf, l4=UDP(sport=9000, dport=40001)), 1001, HOST_A1, HOST_A1["ip"]
            ),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "reply with DSCP: copied to the outer header",
            storage_reply(a_sf, tos=0xB8),
            encapped(storage_reply(a_sf, tos=0xB8), 1001, HOST_A1, HOST_A1["ip"]),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "tagged reply: output untagged",
            storage_reply(a_sf, vlan=7),
            encapped(storage_reply(a_sf), 1001, HOST_A1, HOST_A1["ip"]),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "identity VPC reply",
            storage_reply(HOST_C1["ip"], src="172.17.2.2"),
            encapped(storage_reply(HOST_C1["ip"], src="172.17.2.2"), 1003, HOST_C1, None),
            "compute0",
            vpc="tenant-c",
        ),
        _fwd(
            "IPv6 reply",
            storage_reply(a_sf6, src="fd10::5"),
            encapped(storage_reply(a_sf6, src="fd10::5"), 1001, HOST_A1, HOST_A1["ip6"]),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "8950-byte reply: 9000-byte underlay frame out",
            jumbo_reply,
            encapped(jumbo_reply, 1001, HOST_A1, HOST_A1["ip"]),
            "compute0",
            vpc="tenant-a",
            tags=("jumbo",),
        ),
        _drop(
            "reply to a storage-facing address with no host",
            storage_reply("100.64.9.9"),
            Reason.DROP_HOST_UNKNOWN,
            vpc="tenant-a",
        ),
        _pass(
            "reply with TTL 1", storage_reply(a_sf, ttl=1), Reason.PASS_TTL_EXCEEDED, vpc="tenant-a"
        ),
        _pass(
            "reply fragment",
            storage_reply(a_sf, flags="MF"),
            Reason.PASS_IPV4_FRAGMENT,
            vpc="tenant-a",
        ),
        _pass(
            "reply with IPv4 options",
            storage_reply(a_sf, options=[b"\x01\x01\x01\x00"]),
            Reason.PASS_IPV4_OPTIONS,
            vpc="tenant-a",
        ),
        _drop(
            "reply with a total length beyond the frame",
            Ether() / IP(src="172.16.5.5", dst=a_sf, len=400) / TCP(),
            Reason.DROP_INNER_MALFORMED,
            vpc="tenant-a",
        ),
    ]
    from icmp_fixtures import icmp_rows  # it builds on the helpers above

    return rows + icmp_rows()


def ids(rows: list[Fixture]) -> list[str]:
    """pytest ids: the descriptions."""
    return [r.desc for r in rows]
