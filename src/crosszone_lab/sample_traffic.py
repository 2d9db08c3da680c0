"""A small, readable pcap of gateway traffic for examples/gateway.yaml: what a user feeds to
`crosszone fastpath run` to see every kind of verdict once."""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from scapy.layers.vxlan import VXLAN
from scapy.packet import Packet, Raw

GW_MAC, HOST_NH = "02:00:00:00:10:01", "02:00:00:00:10:fe"
STORAGE_GW_MAC, STORAGE_NH = "02:00:00:00:20:01", "02:00:00:00:30:01"


def _vxlan(inner: Packet, vni: int = 1001, vtep: str = "10.1.0.1") -> Packet:
    return (
        Ether(src=HOST_NH, dst=GW_MAC)
        / IP(src=vtep, dst="10.0.0.100")
        / UDP(sport=50123, dport=4789)
        / VXLAN(vni=vni)
        / Ether(src="02:00:00:01:00:01", dst="02:00:00:00:aa:01")
        / inner
    )


def _reply(dst: str, src: str = "172.16.5.5", size: int = 64) -> Packet:
    ip = IPv6(src=src, dst=dst) if ":" in dst else IP(src=src, dst=dst)
    return (
        Ether(src=STORAGE_NH, dst=STORAGE_GW_MAC)
        / ip
        / TCP(sport=443, dport=40000, flags="A")
        / Raw(b"d" * size)
    )


def sample_frames() -> list[tuple[str, Packet]]:
    """(what it shows, frame) pairs."""
    tcp = TCP(sport=40000, dport=443, flags="S")
    return [
        ("tenant A reads a dataset shard", _vxlan(IP(src="192.168.1.10", dst="172.16.5.5") / tcp)),
        (
            "tenant B, same inner address, other VNI",
            _vxlan(IP(src="192.168.1.10", dst="172.17.0.9") / tcp, vni=1002),
        ),
        ("tenant A over IPv6", _vxlan(IPv6(src="fd00:a::10", dst="fd10::5") / tcp)),
        ("storage replies to tenant A", _reply("100.64.1.10", size=1400)),
        ("storage replies to tenant B", _reply("100.65.1.10", size=1400)),
        ("storage replies over IPv6", _reply("fd64:a::10", src="fd10::5")),
        (
            "9000-byte jumbo frame",
            _vxlan(IP(src="192.168.1.10", dst="172.16.5.5") / tcp / Raw(b"j" * 8910)),
        ),
        ("blackholed prefix", _vxlan(IP(src="192.168.1.10", dst="172.16.99.1") / tcp)),
        ("slow-path prefix", _vxlan(IP(src="192.168.1.10", dst="172.16.98.1") / tcp)),
        ("spoofed VTEP", _vxlan(IP(src="192.168.1.10", dst="172.16.5.5") / tcp, vtep="10.1.0.99")),
        ("unknown VNI", _vxlan(IP(src="192.168.1.10", dst="172.16.5.5") / tcp, vni=777)),
        (
            "TTL 1 (traceroute)",
            _vxlan(IP(src="192.168.1.10", dst="172.16.5.5", ttl=1) / UDP(dport=33434)),
        ),
        (
            "BGP to the gateway",
            Ether(dst=GW_MAC)
            / IP(src="10.1.0.254", dst="10.0.0.100")
            / TCP(sport=40000, dport=179),
        ),
        ("ARP", Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.0.100")),
    ]


def ingress_of(pkt: Packet) -> str:
    """The port of examples/gateway.yaml a sample frame arrives on: storage replies come in on
    storage0 (they are addressed to its MAC), everything else on compute0."""
    return "storage0" if pkt[Ether].dst == STORAGE_GW_MAC else "compute0"


def write_pcap(path: str | Path, ingress: str | None = None) -> list[str]:
    """Write the sample frames (fixed timestamps, so the file is reproducible); with `ingress`,
    only those that arrive on that port. Returns their labels."""
    from scapy.utils import PcapWriter

    labels = []
    with PcapWriter(str(path), linktype=1) as w:
        for i, (label, pkt) in enumerate(sample_frames()):
            if ingress is not None and ingress_of(pkt) != ingress:
                continue
            pkt.time = 1_700_000_000 + i
            w.write(pkt)
            labels.append(label)
    return labels
