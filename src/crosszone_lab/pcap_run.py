"""`crosszone fastpath run`: a pcap through the program (or the model) with an intent's tables.

Every input frame gets one row, also a frame the program never sees: a device drops a frame
shorter than an Ethernet header before XDP runs (BPF_PROG_TEST_RUN refuses it with EINVAL), so it
gets verdict "drop", reason "kernel_runt" in both modes; any other frame the kernel's test run
refuses (e.g. one longer than it can build from pages: ENOMEM) gets "drop", "kernel_refused".
The run goes on with the next frame.
"""

from __future__ import annotations

from pathlib import Path

from crosszone.abi.reasons import XdpAction
from crosszone.compile.encode import bind_ports
from crosszone.compile.tables import Tables, compile_tables
from crosszone.fastpath.libbpf_abi import BpfError
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


ETH_HLEN = 14  # the shortest frame a device hands to XDP
KERNEL_RUNT = "kernel_runt"
KERNEL_REFUSED = "kernel_refused"


def _verdict(
    frame: bytes, runner: TestRunner | None, bound: Tables
) -> tuple[ref.Result | None, str]:
    """The program's (or model's) result and reason label; None when the kernel never runs it."""
    if len(frame) < ETH_HLEN:
        return None, KERNEL_RUNT
    if runner is None:
        res = ref.process(frame, bound, LOOPBACK_IFINDEX)
        return res, res.reason.label
    try:
        res = runner.run(frame)
    except BpfError:
        return None, KERNEL_REFUSED
    return res, res.reason.label


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
                res, reason = _verdict(frame, runner, bound)
                port = res.port if res is not None else None
                out_data = res.data if res is not None and port is not None else frame
                if port is not None:
                    # The input's timestamp: an output pcap lines up with its input.
                    t = float(pkt.time)
                    writer.write_packet(out_data, sec=int(t), usec=int((t % 1) * 1e6))
                rows.append(
                    {
                        "index": i,
                        "verdict": res.action.label if res else XdpAction.DROP.label,
                        "reason": reason,
                        "egress": port_names.get(port) if port is not None else None,
                        "len": len(out_data),
                        "summary": summary(out_data),
                    }
                )
    finally:
        writer.close()
        if runner is not None:
            runner.close()
    return rows
