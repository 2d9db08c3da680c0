"""`crosszone fastpath run`: a pcap through the program (or the model) with an intent's tables."""

from __future__ import annotations

from pathlib import Path

from crosszone.compile.tables import compile_intent
from crosszone.fastpath import model as ref
from crosszone.fastpath.maps_io import bind_ports
from crosszone.fastpath.testrun import LOOPBACK_IFINDEX, TestRunner, test_ifindexes
from crosszone.intent.loader import load_intent


def _summary(data: bytes) -> str:
    from scapy.layers.l2 import Ether

    try:
        return Ether(data).summary()
    except Exception:  # noqa: BLE001 - scapy raises many types on garbage; show the bytes
        return data[:16].hex()


def run_pcap(intent: str | Path, pcap: str | Path, out: str | Path, *, ingress: str | None = None,
             use_model: bool = False) -> list[dict]:
    """Run each frame; write forwarded frames to out; return one row per input frame."""
    from scapy.utils import PcapReader, PcapWriter

    tables = compile_intent(load_intent(intent).intent)
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
    writer = PcapWriter(str(out), linktype=1, sync=True)
    try:
        with PcapReader(str(pcap)) as reader:
            for i, pkt in enumerate(reader):
                frame = bytes(pkt)
                res = (ref.process(frame, bound, LOOPBACK_IFINDEX) if runner is None
                       else runner.run(frame))
                fwd = res.port is not None
                if fwd:
                    writer.write(res.data)
                rows.append({
                    "index": i,
                    "verdict": res.action.label,
                    "reason": res.reason.label,
                    "egress": port_names.get(res.port) if fwd else None,
                    "len": len(res.data) if fwd else len(frame),
                    "summary": _summary(res.data if fwd else frame),
                })
    finally:
        writer.close()
        if runner is not None:
            runner.close()
    return rows
