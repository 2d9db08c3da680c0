"""The agent killed, restarted and upgraded under traffic: the fast path keeps forwarding from its
pinned maps, not one frame is lost in either direction, and the restarted agents write nothing.

Namespaces: host (h0) -- gateway (c0 | s0) -- storage (st0), as in test_deploy_veth. The agent
runs as a real `crosszone agent` process over a SQLite store. While frames stream both ways
(each carrying a sequence number), the agent is SIGKILLed and started again, then SIGKILLed and
started with --reattach (an upgrade: a new program loaded over the pinned maps and attached in
place of the old one). Every frame sent must arrive; each restart's reconcile must write zero
entries; the maps must hold the desired state before and after.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from crosszone.agent.agent import default_state_file, ifindex_in
from crosszone.compile.diff import ARRAY_MAPS, Entries
from crosszone.compile.encode import bind_ports
from crosszone.compile.gateway import Ids, compile_gateway
from crosszone.compile.tables import compile_tables
from crosszone.control.service import Controller
from crosszone.fastpath import deploy
from crosszone.fastpath.libbpf import xdp_query_prog_id
from crosszone.fastpath.sink import MapSink
from crosszone.fastpath.testing import model
from crosszone.intent.cluster import load_cluster, parse_cluster
from crosszone.linux.netns import in_netns
from crosszone.store.sqlite_store import SqliteStore

from packet_fixtures import storage_reply, vxlan
from veth_topology import gateway_between

ETH_P_ALL = 0x0003
SO_RCVBUFFORCE = 33
CLI = Path(sys.executable).with_name("crosszone")
MAGIC = b"CZAGSEQ:"
RATE = 2000  # frames per second and direction
BURST = 10  # frames per direction per tick (one tick every BURST / RATE seconds)


@pytest.fixture()
def topo(tmp_path: Path, bpffs: Path) -> Iterator[tuple[dict[str, str], Path, Path]]:
    """host ns (h0) -- gateway ns (c0 | s0) -- storage ns (st0); the intent; the pin dir."""
    with gateway_between("czag", tmp_path, bpffs) as t:
        yield t


class Counter:
    """Receive on one interface, collecting the sequence numbers of our frames."""

    def __init__(self, netns: str, dev: str) -> None:
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
            self.sock.bind((dev, 0))
        self.sock.settimeout(0.2)
        self.seen: set[int] = set()
        self.first: bytes | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                data, addr = self.sock.recvfrom(65535)
            except TimeoutError:
                continue
            i = data.find(MAGIC)
            if addr[2] == socket.PACKET_OUTGOING or i < 0:
                continue
            self.first = self.first or data
            self.seen.add(struct.unpack_from("!Q", data, i + len(MAGIC))[0])

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


class Sender:
    """Send numbered copies of a frame at RATE per second (in bursts) until stopped."""

    def __init__(self, netns: str, dev: str, frame: bytes) -> None:
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.bind((dev, 0))
        self.frame = bytearray(frame)
        self.at = frame.index(MAGIC) + len(MAGIC)
        self.sent = 0

    def burst(self) -> None:
        for _ in range(BURST):
            struct.pack_into("!Q", self.frame, self.at, self.sent)
            self.sock.send(self.frame)
            self.sent += 1


def _stream(senders: list[Sender], stop: threading.Event) -> None:
    tick = BURST / RATE
    t = time.monotonic()
    while not stop.is_set():
        for s in senders:
            s.burst()
        t += tick
        time.sleep(max(0.0, t - time.monotonic()))


def _frames() -> tuple[bytes, bytes]:
    """(host -> storage VXLAN frame, storage -> host reply), each with MAGIC + 8-byte seq.

    Inner UDP without checksum: the sequence number is patched in place per frame."""
    payload = Raw(MAGIC + bytes(8) + b"p" * 64)
    up = vxlan(
        IP(src="192.168.1.10", dst="172.16.5.5") / UDP(sport=40000, dport=80, chksum=0) / payload
    )
    down = storage_reply("100.64.1.10", l4=UDP(sport=80, dport=40000, chksum=0))
    down = down.copy()
    down[UDP].remove_payload()
    down[UDP].add_payload(payload)
    return bytes(up), bytes(down)


class AgentProc:
    """One `crosszone agent` process, logging to a file."""

    def __init__(self, db: Path, ns: str, pin: Path, log: Path, *extra: str) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [
                str(CLI),
                "agent",
                "--gateway",
                "gw-a",
                "--store",
                f"sqlite://{db}",
                "--netns",
                ns,
                "--pin-dir",
                str(pin),
                "--metrics",
                "",
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
            env={**os.environ, "COLUMNS": "200"},
        )

    def wait_applied(self, state: Path, timeout: float = 60.0) -> dict:
        """The state file once this process has applied a revision."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"agent exited {self.proc.returncode}:\n" + self.log.read_text()
                )
            try:
                st = json.loads(state.read_text())
                if st.get("pid") == self.proc.pid:
                    return st
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        raise AssertionError("agent did not apply in time:\n" + self.log.read_text())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def _expected(intent: Path, netns: str, sent: bytes, got: bytes) -> bytes:
    """The reference model's output for the frame (with got's sequence number) that was sent."""
    at = got.index(MAGIC) + len(MAGIC)
    frame = bytearray(sent)
    i = frame.index(MAGIC) + len(MAGIC)
    frame[i : i + 8] = got[at : at + 8]
    with in_netns(netns):
        bound = bind_ports(compile_tables(load_cluster(intent), "gw-a"), socket.if_nametoindex)
        ingress = socket.if_nametoindex("c0" if frame[36:38] == b"\x12\xb5" else "s0")
    out = model.process(bytes(frame), bound, ingress).data
    assert out is not None
    return out


def _read_maps(pin: Path, wanted: Entries) -> Entries:
    got = MapSink(deploy.pinned_maps(pin)).read(wanted)
    return {k: v for k, v in got.items() if v or k not in ARRAY_MAPS}


def test_restart_and_upgrade_under_traffic_lose_nothing(topo, tmp_path: Path) -> None:
    ns, intent, pin = topo
    db, log, state = (tmp_path / "state.db", tmp_path / "agent.log", default_state_file(pin))
    store = SqliteStore(str(db))
    Controller(store).apply(intent.read_text(), source=str(intent))
    agents: list[AgentProc] = []
    counters: list[Counter] = []
    stop = threading.Event()
    streamer: threading.Thread | None = None
    try:
        agents.append(AgentProc(db, ns["gw"], pin, log))
        first = agents[-1].wait_applied(state)
        assert first["last"]["mode"] == "full" and first["last"]["puts"] > 0, first

        cluster = parse_cluster(intent.read_text(), str(intent))
        want = compile_gateway(
            cluster, "gw-a", ifindex_in(ns["gw"]), Ids.from_json(json.dumps(first["ids"]))
        ).entries
        wanted = {k: v for k, v in want.items() if v or k not in ARRAY_MAPS}
        assert _read_maps(pin, want) == wanted, "first start did not program the intent"

        up, down = _frames()
        counters = [Counter(ns["st"], "st0"), Counter(ns["h"], "h0")]
        senders = [Sender(ns["h"], "h0", up), Sender(ns["st"], "st0", down)]
        streamer = threading.Thread(target=_stream, args=(senders, stop), daemon=True)
        streamer.start()
        time.sleep(1.0)

        agents[-1].kill()  # crash: nothing runs the control plane now
        time.sleep(0.5)
        agents.append(AgentProc(db, ns["gw"], pin, log))
        again = agents[-1].wait_applied(state)
        assert again["last"]["mode"] == "full" and again["last"]["puts"] == 0, again
        assert again["last"]["deletes"] == 0 and again["ids"] == first["ids"], again
        time.sleep(0.5)

        with in_netns(ns["gw"]):
            prog_before = xdp_query_prog_id(socket.if_nametoindex("c0"))
        agents[-1].kill()
        agents.append(AgentProc(db, ns["gw"], pin, log, "--reattach"))  # upgrade
        upgraded = agents[-1].wait_applied(state)
        assert upgraded["last"]["puts"] == 0 and upgraded["last"]["deletes"] == 0, upgraded
        with in_netns(ns["gw"]):
            prog_after = xdp_query_prog_id(socket.if_nametoindex("c0"))
            assert xdp_query_prog_id(socket.if_nametoindex("s0")) == prog_after
        assert prog_after and prog_after != prog_before, "the upgrade did not replace the program"
        time.sleep(1.0)

        stop.set()
        streamer.join(10)
        time.sleep(0.5)  # the last frames in flight
        for c in counters:
            c.close()
        for s in senders:
            s.sock.close()
        figures = {
            "up_sent": senders[0].sent,
            "up_received": len(counters[0].seen),
            "down_sent": senders[1].sent,
            "down_received": len(counters[1].seen),
        }
        figures["reasons"] = {
            r.name: n for r, (n, _b) in deploy.pinned_maps(pin).reason_stats().items() if n
        }
        print("zero-loss restart:", json.dumps(figures))
        (tmp_path / "figures.json").write_text(json.dumps(figures))
        assert senders[0].sent > 3 * RATE and senders[1].sent > 3 * RATE, figures
        assert counters[0].seen == set(range(senders[0].sent)), figures
        assert counters[1].seen == set(range(senders[1].sent)), figures
        for c, frame in zip(counters, (up, down)):
            assert c.first is not None and c.first == _expected(intent, ns["gw"], frame, c.first)
        assert _read_maps(pin, want) == wanted, "the restarts changed the maps"
    finally:
        stop.set()
        if streamer is not None:
            streamer.join(10)
        for c in counters:
            if not c.stop.is_set():
                c.close()
        for a in agents:
            a.kill()
        store.close()
        state.unlink(missing_ok=True)


def test_read_back_at_scale_is_what_was_written(bpffs: Path, gateway_object: Path) -> None:
    """The restart's read-back (BpfMap.dump) gives exactly the programmed entries, quickly:
    200k routes and 20k compact hosts (the full-scale figure is in `crosszone bench control`)."""
    import shutil

    from crosszone.compile.diff import diff_entries
    from crosszone.fastpath.libbpf import BpfObject
    from crosszone.fastpath.maps_io import GatewayMaps
    from crosszone_lab.bench.control import synthetic

    cluster = parse_cluster(synthetic(200_000, 20_000), "scale.yaml")
    desired = compile_gateway(cluster, "gw-a", lambda n: 1).entries
    pins = bpffs / f"czrb-{secrets.token_hex(4)}"
    pins.mkdir()
    try:
        with BpfObject.open(gateway_object, pin_maps_dir=pins) as obj:
            sink = MapSink(GatewayMaps.of(obj))
            for op in diff_entries({}, desired):
                sink.apply(op)
            t0 = time.perf_counter()
            got = sink.read(desired)
            took = time.perf_counter() - t0
            assert diff_entries(got, desired) == []  # nothing to write after a restart
            for name in ("routes4", "hosts", "vtep_allowed"):
                assert got[name] == desired[name]
            assert took < 10, took  # ~1 s; one lookup per entry took ~8 s here
    finally:
        shutil.rmtree(pins, ignore_errors=True)
