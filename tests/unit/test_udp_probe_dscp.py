"""The UDP probe's DSCP: set on every sending socket, both families; the emulator's first class."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from crosszone_lab.emulate import topology
from crosszone_lab.workload import probe, udp_probe

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("dscp", [0, 10, 46, 63])
def test_sender_marks_ipv4_with_the_dscp_and_no_ecn(dscp: int) -> None:
    s = udp_probe.sender(socket.AF_INET, "127.0.0.1", dscp)
    try:
        assert s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == dscp << 2
        assert s.getsockname()[1] != 0
    finally:
        s.close()


def test_sender_marks_ipv6_traffic_class() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 in this Python")
    s = udp_probe.sender(socket.AF_INET6, "::1", 46)
    try:
        assert s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS) == 46 << 2
    finally:
        s.close()


def test_a_marked_datagram_arrives_with_its_tos() -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.setsockopt(socket.IPPROTO_IP, socket.IP_RECVTOS, 1)
    rx.settimeout(2)
    tx = udp_probe.sender(socket.AF_INET, "127.0.0.1", 46)
    try:
        tx.sendto(b"x", rx.getsockname())
        _data, anc, _flags, _addr = rx.recvmsg(16, socket.CMSG_SPACE(4))
        tos = [c[2][0] for c in anc if c[0] == socket.IPPROTO_IP and c[1] == socket.IP_TOS]
        assert tos == [46 << 2]
    finally:
        tx.close()
        rx.close()


@pytest.mark.parametrize("dscp", [-1, 64])
def test_out_of_range_dscp_is_refused(dscp: int) -> None:
    with pytest.raises(ValueError, match="0 to 63"):
        udp_probe.sender(socket.AF_INET, "127.0.0.1", dscp)
    with pytest.raises(SystemExit):
        udp_probe.main(["--bind", "127.0.0.1", "--to", "127.0.0.1", "--duration", "1",
                        "--out", "/nonexistent/x", "--dscp", str(dscp)])


def test_priority_dscp_is_the_small_class_only_with_queues() -> None:
    migrate = topology.load(ROOT / "examples" / "migrate.yaml")
    assert migrate.queues is not None
    assert migrate.priority_dscp == migrate.policy.small_dscp == 46
    plain = topology.load(ROOT / "examples" / "emulate-small.yaml")
    assert plain.queues is None and plain.priority_dscp == 0


@pytest.mark.parametrize("family,addr,level,opt", [
    (socket.AF_INET, "127.0.0.1", socket.IPPROTO_IP, socket.IP_TOS),
    (socket.AF_INET6, "::1", socket.IPPROTO_IPV6, socket.IPV6_TCLASS)])
def test_guard_probe_connects_marked_from_the_syn_on(family, addr, level, opt) -> None:
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.bind((addr, 0))
    srv.listen(1)
    try:
        t = probe.Target("", addr, "/x", b"", port=srv.getsockname()[1], dscp=46)
        s = probe._connect(t, 2.0)
        try:
            assert s.getsockopt(level, opt) == 46 << 2
        finally:
            s.close()
        plain = probe._connect(probe.Target("", addr, "/x", b"", port=t.port), 2.0)
        try:
            assert plain.getsockopt(level, opt) == 0
        finally:
            plain.close()
    finally:
        srv.close()
