"""The emulator's priority queues in the kernel: under contention the small class gets through.

Two namespaces joined by a veth; the sender's end gets the queues of `emulate/queues.py` (htb
at a low rate, three classes, the DSCP classifier). The sender offers three times the link rate
of bulk-marked datagrams and a third of it of small-marked ones: strict priority must deliver
(nearly) every small datagram, and a FIFO (both unmarked: the policy off) must not. The same
holds when the DSCP is the inner one of a VXLAN frame (outer TOS 0, as the legacy gateway
sends them). Loose bounds: the box is shared."""

from __future__ import annotations

import secrets
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from crosszone.linux.netns import Executor, cmd, delete_namespaces, in_netns, in_ns
from crosszone_lab.emulate import queues

RATE_MBIT = 20
PAYLOAD = 1200
SECONDS = 2.0
SMALL, BULK = 46, 10
PORT = 4789  # the VXLAN port: the classifier then reads the inner DSCP of the VXLAN cases


@pytest.fixture
def link() -> Iterator[tuple[str, str]]:
    """(sender ns, receiver ns) with the queues on the sender's end; always removed."""
    tag = secrets.token_hex(3)
    tx, rx = f"czq-{tag}-tx", f"czq-{tag}-rx"
    ex = Executor()
    try:
        ex.apply([cmd("ip", "netns", "add", tx), cmd("ip", "netns", "add", rx),
                  cmd("ip", "-n", tx, "link", "add", "q0", "type", "veth", "peer", "name", "q1",
                      "netns", rx),
                  in_ns(tx, "ip", "addr", "add", "10.99.0.1/24", "dev", "q0"),
                  in_ns(rx, "ip", "addr", "add", "10.99.0.2/24", "dev", "q1"),
                  in_ns(tx, "ip", "link", "set", "q0", "up"),
                  in_ns(rx, "ip", "link", "set", "q1", "up"),
                  in_ns(tx, "ip", "neigh", "replace", "10.99.0.2", "lladdr", "02:99:00:00:00:02",
                        "dev", "q0", "nud", "permanent"),
                  in_ns(rx, "ip", "link", "set", "q1", "address", "02:99:00:00:00:02")])
        ex.apply(queues.port_ops(tx, "q0", queues.QueueSpec(rate_mbit=RATE_MBIT,
                                                            limit_kbytes=64), SMALL, BULK))
        yield tx, rx
    finally:
        ex.apply(delete_namespaces([tx, rx]))


TAG = {"small": 1, "bulk": 2}  # the last payload byte: which sender a datagram came from


def _datagram(dscp: int, tag: int, vxlan: bool) -> tuple[bytes, int]:
    """(payload, outer TOS): a plain datagram marked `dscp`, or a VXLAN frame whose inner IPv4
    header carries it (outer TOS 0); the payload is filled with `tag`."""
    if not vxlan:
        return bytes([tag]) * PAYLOAD, dscp << 2
    inner_ip = struct.pack("!BBHHHBBH4s4s", 0x45, dscp << 2, PAYLOAD - 22, 0, 0, 64, 17, 0,
                           bytes(4), bytes(4))
    frame = b"\x08\x00\x00\x00\x00\x03\xe9\x00" + bytes(12) + b"\x08\x00" + inner_ip
    return frame + bytes([tag]) * (PAYLOAD - len(frame)), 0


def _offer(tx: str, small_dscp: int, bulk_dscp: int, vxlan: bool) -> tuple[int, int]:
    """Send for SECONDS: 3x the link rate of bulk, 1/3 of it of small; (small, bulk) sent."""
    with in_netns(tx):
        socks = {}
        for role, dscp in (("small", small_dscp), ("bulk", bulk_dscp)):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            payload, tos = _datagram(dscp, TAG[role], vxlan)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
            socks[role] = (s, payload)
    per_tick = RATE_MBIT * 1e6 / 8 / PAYLOAD / 100  # datagrams per 10 ms at the link rate
    sent = {"small": 0, "bulk": 0}
    start = time.monotonic()
    tick = 0
    while time.monotonic() - start < SECONDS:
        for role, n in (("bulk", 3 * per_tick), ("small", per_tick / 3)):
            s, payload = socks[role]
            want = int((tick + 1) * n) - int(tick * n)
            for _ in range(want):
                s.sendto(payload, ("10.99.0.2", PORT))
                sent[role] += 1
        tick += 1
        time.sleep(max(0.0, start + tick * 0.01 - time.monotonic()))
    for s, _ in socks.values():
        s.close()
    return sent["small"], sent["bulk"]


def _run(link: tuple[str, str], small_dscp: int, bulk_dscp: int,
         vxlan: bool) -> tuple[float, float]:
    """Fraction of small and of bulk datagrams delivered."""
    tx, rx = link
    with in_netns(rx):
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        r.bind(("10.99.0.2", PORT))
    r.settimeout(0.5)
    got = dict.fromkeys(TAG.values(), 0)
    done = threading.Event()

    def receive() -> None:
        while not done.is_set():
            try:
                data = r.recv(65536)
            except TimeoutError:
                continue
            got[data[-1]] = got.get(data[-1], 0) + 1

    t = threading.Thread(target=receive, daemon=True)
    t.start()
    try:
        small_sent, bulk_sent = _offer(tx, small_dscp, bulk_dscp, vxlan)
        time.sleep(0.6)  # drain the queues (64 KB at 20 Mbit/s: 26 ms)
    finally:
        done.set()
        t.join(timeout=2)
        r.close()
    return got[TAG["small"]] / small_sent, got[TAG["bulk"]] / bulk_sent


@pytest.mark.parametrize("vxlan", [False, True], ids=["plain", "vxlan-inner"])
def test_small_class_wins_under_contention(link: tuple[str, str], vxlan: bool) -> None:
    small, bulk = _run(link, SMALL, BULK, vxlan)
    assert bulk < 0.6, f"no contention: {bulk:.0%} of the bulk offered got through"
    assert small > 0.9, f"strict priority: only {small:.0%} of the small datagrams got through"
    stats = queues.class_stats(Executor().output(
        ["ip", "netns", "exec", link[0], "tc", "-s", "class", "show", "dev", "q0"]))
    assert stats[f"1:{queues.class_minor(SMALL):x}"]["packets"] > 0
    assert stats[f"1:{queues.class_minor(BULK):x}"]["drops"] > 0


def test_without_marks_small_datagrams_wait_in_one_fifo(link: tuple[str, str]) -> None:
    """The policy off: unmarked traffic shares the default class, and small loses with bulk."""
    small, _ = _run(link, 0, 0, vxlan=False)
    # In one FIFO both get the same share (~1/3.3 here); 0.9 is what priority gives.
    assert small < 0.7, f"{small:.0%} of small datagrams without priority: is the link slow?"
    stats = queues.class_stats(Executor().output(
        ["ip", "netns", "exec", link[0], "tc", "-s", "class", "show", "dev", "q0"]))
    assert stats[f"1:{queues.DEFAULT_MINOR:x}"]["drops"] > 0
    assert stats[f"1:{queues.class_minor(SMALL):x}"]["packets"] == 0
