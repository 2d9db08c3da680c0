"""Fixture rows for ICMP errors and for the port a reply arrives on (part of the table in
`packet_fixtures.py`, kept apart to keep that module readable).

An ICMP error quotes the packet that caused it. The gateway translates the quoted address with the
outer one (issue 12, findings 11 and 12). Each expected frame is built from scratch by scapy with
the quoted header already holding the address the tenant (or storage) used, so scapy computes the
quoted IPv4 header checksum and the ICMP checksum itself: a byte-for-byte match proves the
program's incremental updates. The quoted transport checksum is given explicitly: the gateway
leaves it as the sender computed it (no stack checks it in an ICMP quote).
"""

from __future__ import annotations

from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import ICMPv6DestUnreach, ICMPv6PacketTooBig, IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Packet, Raw

from crosszone.abi.reasons import Reason

from packet_fixtures import (
    HOST_A1,
    PAYLOAD,
    STORAGE_MAC,
    Fixture,
    _drop,
    _fwd,
    decapped,
    encapped,
    storage_reply,
    translate,
    vxlan,
)

STORAGE_ROUTER4, STORAGE_ROUTER6 = "172.16.0.1", "fd10::1"


def _quote4(
    src: str, dst: str, l4: Packet, sent: tuple[str, str] | None = None, keep: int = 28
) -> bytes:
    """The first `keep` bytes of an IPv4 packet as an ICMP error quotes it. sent: the (source,
    destination) the transport checksum was computed for, when not (src, dst)."""
    s, d = sent or (src, dst)
    wire = IP(bytes(IP(src=s, dst=d, id=11, ttl=63) / l4 / PAYLOAD))
    quoted = IP(src=src, dst=dst, id=11, ttl=63, len=wire.len) / l4.__class__(bytes(wire.payload))
    return bytes(quoted)[:keep]


def _quote6(src: str, dst: str, l4: Packet, sent_as: tuple[str, str] | None = None) -> bytes:
    """A whole IPv6 packet as quoted by packet too big (it fits in 1280 bytes)."""
    s, d = sent_as or (src, dst)
    sent = IPv6(bytes(IPv6(src=s, dst=d, hlim=63) / l4 / PAYLOAD))
    return bytes(IPv6(src=src, dst=dst, hlim=63) / l4.__class__(bytes(sent.payload)))


def _icmp4_from_storage(dst: str, icmp: Packet, quote: bytes) -> Packet:
    eth = Ether(src="02:00:00:00:30:01", dst=STORAGE_MAC)
    return eth / IP(src=STORAGE_ROUTER4, dst=dst, id=9) / icmp / Raw(quote)


def _icmp6_from_storage(dst: str, icmp: Packet, quote: bytes) -> Packet:
    eth = Ether(src="02:00:00:00:30:01", dst=STORAGE_MAC)
    return eth / IPv6(src=STORAGE_ROUTER6, dst=dst) / icmp / Raw(quote)


def icmp_rows() -> list[Fixture]:
    """Reply-port and ICMP-error rows."""
    a_ip, a_ip6 = HOST_A1["ip"], HOST_A1["ip6"]
    a_sf, a_sf6 = translate(a_ip, 1001), translate(a_ip6, 1001)
    tcp = TCP(sport=40000, dport=80, flags="A")
    udp = UDP(sport=9000, dport=40001)
    frag4 = ICMP(type=3, code=4, nexthopmtu=1400)
    # storage -> compute: the quote is what storage received (source = storage-facing address)
    q4_in = _quote4(a_sf, "172.16.5.5", tcp)
    q4_out = _quote4(a_ip, "172.16.5.5", tcp, (a_sf, "172.16.5.5"))
    q4_long_in = _quote4(a_sf, "172.16.5.5", tcp, keep=200)
    q4_long_out = _quote4(a_ip, "172.16.5.5", tcp, (a_sf, "172.16.5.5"), keep=200)
    q6_in = _quote6(a_sf6, "fd10::5", tcp)
    q6_out = _quote6(a_ip6, "fd10::5", tcp, (a_sf6, "fd10::5"))
    ptb = ICMPv6PacketTooBig(mtu=1280)
    # compute -> storage: a host's error about a reply quotes the reply (destination = host)
    h4_in = _quote4("172.16.5.5", a_ip, udp)
    h4_out = _quote4("172.16.5.5", a_sf, udp, ("172.16.5.5", a_ip))
    h6_in = _quote6("fd10::5", a_ip6, udp)
    h6_out = _quote6("fd10::5", a_sf6, udp, ("fd10::5", a_ip6))

    def host4(quote: bytes) -> Packet:
        return IP(src=a_ip, dst="172.16.5.5", id=5) / ICMP(type=3, code=3) / Raw(quote)

    def host6(quote: bytes) -> Packet:
        return IPv6(src=a_ip6, dst="fd10::5") / ICMPv6DestUnreach(code=4) / Raw(quote)

    return [
        # finding 11: a reply is accepted only from a storage port
        _drop(
            "reply arriving on the compute port: dropped",
            storage_reply(a_sf),
            Reason.DROP_REPLY_WRONG_PORT,
            ingress="compute0",
            vpc="tenant-a",
        ),
        _drop(
            "IPv6 reply arriving on the compute port: dropped",
            storage_reply(a_sf6, src="fd10::5"),
            Reason.DROP_REPLY_WRONG_PORT,
            ingress="compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "reply arriving on the storage port: forwarded",
            storage_reply(a_sf),
            encapped(storage_reply(a_sf), 1001, HOST_A1, a_ip),
            "compute0",
            ingress="storage0",
            vpc="tenant-a",
        ),
        # finding 12: ICMP errors from storage, quoted source translated back
        _fwd(
            "fragmentation needed from storage: quoted source translated back",
            _icmp4_from_storage(a_sf, frag4, q4_in),
            encapped(_icmp4_from_storage(a_sf, frag4, q4_out), 1001, HOST_A1, a_ip),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "fragmentation needed quoting 200 bytes: same",
            _icmp4_from_storage(a_sf, frag4, q4_long_in),
            encapped(_icmp4_from_storage(a_sf, frag4, q4_long_out), 1001, HOST_A1, a_ip),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "time exceeded from a storage router: quoted source translated back",
            _icmp4_from_storage(a_sf, ICMP(type=11, code=0), q4_in),
            encapped(_icmp4_from_storage(a_sf, ICMP(type=11, code=0), q4_out), 1001, HOST_A1, a_ip),
            "compute0",
            vpc="tenant-a",
        ),
        _fwd(
            "packet too big from storage: quoted source translated back (ICMPv6 checksum)",
            _icmp6_from_storage(a_sf6, ptb, q6_in),
            encapped(_icmp6_from_storage(a_sf6, ptb, q6_out), 1001, HOST_A1, a_ip6),
            "compute0",
            vpc="tenant-a",
        ),
        _drop(
            "fragmentation needed quoting another address",
            _icmp4_from_storage(a_sf, frag4, _quote4(translate("192.168.1.11", 1001), "172.16.5.5",
                                                     tcp)),
            Reason.DROP_ICMP_QUOTE,
            vpc="tenant-a",
        ),
        _drop(
            "fragmentation needed with a quote shorter than an IPv4 header",
            _icmp4_from_storage(a_sf, frag4, q4_in[:19]),
            Reason.DROP_ICMP_QUOTE,
            vpc="tenant-a",
        ),
        _drop(
            "packet too big with a quote shorter than an IPv6 header",
            _icmp6_from_storage(a_sf6, ptb, q6_in[:39]),
            Reason.DROP_ICMP_QUOTE,
            vpc="tenant-a",
        ),
        _drop(
            "fragmentation needed quoting a non-IPv4 header",
            _icmp4_from_storage(a_sf, frag4, b"\x60" + q4_in[1:]),
            Reason.DROP_ICMP_QUOTE,
            vpc="tenant-a",
        ),
        # and from compute: a host's error about a reply, quoted destination translated
        _fwd(
            "port unreachable from a host: quoted destination translated",
            vxlan(host4(h4_in)),
            decapped(host4(h4_out), "datasets", a_sf),
            "storage0",
            vpc="tenant-a",
        ),
        _fwd(
            "ICMPv6 unreachable from a host: quoted destination translated",
            vxlan(host6(h6_in)),
            decapped(host6(h6_out), "datasets", a_sf6),
            "storage0",
            vpc="tenant-a",
        ),
        _drop(
            "host error quoting another host's address",
            vxlan(host4(_quote4("172.16.5.5", "192.168.1.11", udp))),
            Reason.DROP_ICMP_QUOTE,
            vpc="tenant-a",
        ),
    ]
