"""cz_sender, the ordinary sender of `bench forward`: frames it puts on a veth reach the peer
intact (the bench's validating sink counts them good, one by one), in each of its modes, with
no BPF test run involved; a frame it was given wrong is counted corrupted, not good."""

from __future__ import annotations

import json
import os
import secrets
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from crosszone.fastpath.libbpf import BpfObject, xdp_attach, xdp_detach
from crosszone.linux.netns import in_netns
from crosszone_lab.bench import forward as fwd

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creates namespaces: needs root")

GOOD, CORRUPTED, MISROUTED = fwd.COUNT_GOOD, fwd.COUNT_CORRUPTED, fwd.COUNT_MISROUTED


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture
def veth() -> Iterator[tuple[str, int, int]]:
    """A namespace with a veth pair a -- b, both up, no IPv6 chatter: (ns, ifindex a, b)."""
    ns = f"czsnd-{secrets.token_hex(4)}"
    sh("ip", "netns", "add", ns)
    try:
        for conf in ("all", "default"):
            sh("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{conf}.disable_ipv6=1")
        sh("ip", "-n", ns, "link", "add", "snda", "type", "veth", "peer", "name", "sndb")
        for dev in ("snda", "sndb"):
            sh("ip", "-n", ns, "link", "set", dev, "up")
        idx = {}
        for dev in ("snda", "sndb"):
            out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", dev], check=True,
                                 capture_output=True, text=True).stdout
            idx[dev] = int(json.loads(out)[0]["ifindex"])
        yield ns, idx["snda"], idx["sndb"]
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)


def inner_frame() -> bytes:
    """What the bench's gateways deliver: the inner frame of its VXLAN frame (the sink checks
    addresses, destination MAC, lengths, checksums and the payload pattern)."""
    return fwd.bench_frame()[50:]


def send(ns: str, ifindex: int, frame: bytes, mode: str, tmp: Path,
         seconds: float = 0.3) -> dict:
    """Run cz_sender in `ns`: a small warm-up, then `seconds` of sending; its report."""
    path = tmp / "frame"
    path.write_bytes(frame)
    argv = ["ip", "netns", "exec", ns, str(fwd.SENDER), "--mode", mode, "--ifindex",
            str(ifindex), "--frame", str(path), "--seconds", str(seconds), "--warmup", "100"]
    res = subprocess.run(argv, input="go\n", capture_output=True, text=True, timeout=30,
                         check=True)
    ready, report = res.stdout.splitlines()
    assert ready == "ready"
    return dict(json.loads(report))


def counts(sink: BpfObject) -> list[int]:
    return [sum(struct.unpack("<Q", v[:8])[0] for v in
                sink.map("counts").lookup_percpu(struct.pack("<I", k))) for k in range(4)]


@pytest.fixture
def sink(veth: tuple[str, int, int]) -> Iterator[BpfObject]:
    """The bench's validating sink on b, expecting the inner frame's flow."""
    ns, _, b = veth
    obj = BpfObject.open(fwd.bench_objects()["sink"])
    obj.map("expect").update(struct.pack("<I", 0), struct.pack(
        "<4s4s6sH", bytes(map(int, fwd.INNER_SRC.split("."))),
        bytes(map(int, fwd.STORAGE_DST.split("."))), bytes.fromhex("02b000000afe"),
        fwd.UDP_DPORT))
    with in_netns(ns):
        xdp_attach(b, obj.program("cz_bench_sink").fd)
    try:
        yield obj
    finally:
        with in_netns(ns):
            xdp_detach(b)
        obj.close()


@pytest.mark.parametrize("mode", ["tx_ring", "sendmmsg", "af_xdp"])
def test_every_sent_frame_reaches_the_peer_intact(veth, sink, mode, tmp_path):
    ns, a, _ = veth
    report = send(ns, a, inner_frame(), mode, tmp_path)
    assert report["mode"] == mode and report["errors"] == 0
    assert report["sent"] > 1000 and report["ns"] > 0 and report["busy_ns"] >= 0
    good, corrupted, misrouted, _ = counts(sink)
    # the warm-up's 100 frames are counted too: every frame the sender sent arrived good
    assert good == report["sent"] + 100
    assert corrupted == misrouted == 0


def test_a_wrong_frame_is_counted_corrupted_not_good(veth, sink, tmp_path):
    ns, a, _ = veth
    bad = bytearray(inner_frame())
    bad[14 + 20 + 8 + 5] ^= 0xFF  # a payload word the sink checks
    report = send(ns, a, bytes(bad), "tx_ring", tmp_path)
    good, corrupted, _, _ = counts(sink)
    assert good == 0 and corrupted == report["sent"] + 100


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    res = subprocess.run([str(fwd.SENDER), "--ifindex", "1"], capture_output=True, text=True,
                         check=False)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("cz_sender: ") and "usage" in res.stderr
    small = tmp_path / "small"
    small.write_bytes(b"\0" * 20)
    res = subprocess.run([str(fwd.SENDER), "--ifindex", "1", "--frame", str(small),
                          "--seconds", "1"], capture_output=True, text=True, check=False)
    assert res.returncode == 2 and "96 to" in res.stderr
