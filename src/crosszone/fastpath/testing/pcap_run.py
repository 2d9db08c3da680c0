"""`crosszone fastpath run`: a pcap through the program (or the model) with an intent's tables."""

from __future__ import annotations

from pathlib import Path

from crosszone.compile.encode import bind_ports
from crosszone.compile.tables import compile_tables
from crosszone.fastpath.testing import model as ref
from crosszone.fastpath.testing.testrun import LOOPBACK_IFINDEX, TestRunner, test_ifindexes
from crosszone.intent.cluster import load_cluster, only_gateway


def _ip_text(pkt) -> str:  # type: ignore[no-untyped-def]
    from scapy.layers.inet import IP
    from scapy.layers.inet6 import IPv6

    if IP in pkt:
        return f"{pkt[IP].src} > {pkt[IP].dst} ttl {pkt[IP].ttl}"
    if IPv6 in pkt:
        return f"{pkt[IPv6].src} > {pkt[IPv6].dst} hlim {pkt[IPv6].hlim}"
    return pkt.summary()


def summary(data: bytes) -> str:
    """The headers a network engineer checks, e.g. 'VXLAN 10.0.0.100 > 10.1.0.1 vni 1001 | ...'."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN

    try:
        eth = Ether(data)
        if VXLAN in eth:
            inner = eth[VXLAN].payload
            return (
                f"VXLAN {eth[IP].src} > {eth[IP].dst} vni {eth[VXLAN].vni} "
                f"sport {eth[UDP].sport} | {_ip_text(inner)}"
            )
        return f"to {eth.dst}: {_ip_text(eth)}"
    except Exception:
        return data[:16].hex()


def run_pcap(
    intent: str | Path,
    pcap: str | Path,
    out: str | Path,
    *,
    ingress: str | None = None,
    use_model: bool = False,
    gateway: str | None = None,
) -> list[dict]:
    """Run each frame; write forwarded frames to out; return one row per input frame."""
    from scapy.utils import PcapReader, PcapWriter

    c = load_cluster(intent)
    tables = compile_tables(c, only_gateway(c, gateway, str(intent)))
    names = [p.name for p in tables.ports]
    if ingress is not None and ingress not in names:
        raise ValueError(f"--ingress {ingress!r} is not an interface of the intent ({names})")
    fake = test_ifindexes(tables)

    def ifindex_of(name: str) -> int:
        # The ingress port gets lo's ifindex, the one the test run claims frames arrive on.
        return LOOPBACK_IFINDEX if name == ingress else fake(name)

    if not Path(pcap).exists():
        raise FileNotFoundError(f"no such file: {pcap}")
    rows: list[dict] = []
    runner = None if use_model else TestRunner(tables, ifindex_of=ifindex_of)
    bound = runner.tables if runner else bind_ports(tables, ifindex_of)
    port_names = {p.index: p.name for p in bound.ports}
    from scapy.error import Scapy_Exception

    try:
        reader = PcapReader(str(pcap))
    except Scapy_Exception as exc:
        raise ValueError(f"not a pcap file ({exc})") from None
    writer = PcapWriter(str(out), linktype=1, sync=True)
    writer.write_header(None)  # also for zero forwarded frames: an empty pcap, not an empty file
    try:
        with reader:
            for i, pkt in enumerate(reader):
                frame = bytes(pkt)
                res = (
                    ref.process(frame, bound, LOOPBACK_IFINDEX)
                    if runner is None
                    else runner.run(frame)
                )
                fwd = res.port is not None
                if fwd:
                    # The input's timestamp: an output pcap lines up with its input.
                    t = float(pkt.time)
                    writer.write_packet(res.data, sec=int(t), usec=int((t % 1) * 1e6))
                rows.append(
                    {
                        "index": i,
                        "verdict": res.action.label,
                        "reason": res.reason.label,
                        "egress": port_names.get(res.port) if res.port is not None else None,
                        "len": len(res.data) if fwd else len(frame),
                        "summary": summary(res.data if fwd else frame),
                    }
                )
    finally:
        writer.close()
        if runner is not None:
            runner.close()
    return rows
