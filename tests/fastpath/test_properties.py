"""Property tests on the real program: it agrees with the reference model on every frame
(valid, random or malformed; jumbo frames that the test run builds as multi-buffer xdp_buffs;
QinQ and inner VLAN tags; chained IPv6 extension headers; ICMP errors; frames under 14 bytes,
which the kernel never hands to XDP), and tenants stay isolated whatever comes in."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from scapy.layers.inet import IP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.layers.vxlan import VXLAN

from crosszone.abi.reasons import Reason, XdpAction
from crosszone.fastpath.testing import model
from crosszone.fastpath.testing.testrun import LOOPBACK_IFINDEX, TestRunner
from crosszone_lab.pcap_run import _verdict

from fixture_runs import ifindexes
from packet_fixtures import tables
from packet_strategies import MULTI_BUFFER, frames

SETTINGS = settings(
    max_examples=600,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def runner(gateway_object):
    r = TestRunner(tables(), gateway_object)
    yield r
    r.close()


@pytest.fixture(scope="module")
def compute_runner(gateway_object):
    """Frames arrive on the compute port (its ifindex is the test run's lo)."""
    r = TestRunner(tables(), gateway_object, ifindex_of=ifindexes(tables(), "compute0"))
    yield r
    r.close()


def assert_agree(runner, frame: bytes) -> None:
    """Program and model: same verdict, reason, port, VPC and bytes (runts: both kernel_runt)."""
    k, k_reason = _verdict(frame, runner, runner.tables)
    m, m_reason = _verdict(frame, None, runner.tables)  # the model, tables bound alike
    assert k_reason == m_reason
    if k is None or m is None:
        assert k is m is None and len(frame) < 14
        return
    assert (k.action, k.reason, k.port, k.vpc_id) == (m.action, m.reason, m.port, m.vpc_id)
    assert k.data == m.data


@SETTINGS
@given(frame=frames())
def test_program_and_model_agree(runner, frame):
    assert_agree(runner, frame)


@settings(SETTINGS, max_examples=300)
@given(frame=frames())
def test_program_and_model_agree_on_the_compute_port(compute_runner, frame):
    assert_agree(compute_runner, frame)


def test_multi_buffer_frames_agree(runner, compute_runner):
    """Jumbo frames in both directions, intact and with a byte flipped beyond the first buffer."""
    from scapy.layers.inet import TCP
    from scapy.layers.l2 import Dot1AD, Dot1Q
    from scapy.packet import Raw

    from packet_fixtures import storage_reply, vxlan

    big = Raw(b"j" * 8800)
    frames_ = [
        bytes(vxlan(IP(src="192.168.1.10", dst="172.16.5.5") / TCP(sport=1, dport=2) / big)),
        bytes(vxlan(IPv6(src="fd00:a::10", dst="fd10::5") / TCP(sport=1, dport=2) / big, vlan=5)),
        bytes(storage_reply("100.64.1.10") / big),
        bytes(storage_reply("fd64:a::10", src="fd10::5") / big),
        bytes(Ether() / Dot1AD(vlan=3) / Dot1Q(vlan=4) / IP(dst="100.64.1.10") / TCP() / big),
    ]
    n = 0
    for frame in frames_:
        assert len(frame) > MULTI_BUFFER
        for variant in (frame, frame[:6000] + b"\xff" + frame[6001:], frame[:MULTI_BUFFER]):
            for r in (runner, compute_runner):
                assert_agree(r, variant)
                n += 1
    assert n == 30


def _vpc_of_vni(t, vni):
    return next((v for v in t.vpcs if v.vni == vni), None)


def assert_isolated(t, frame: bytes, res: model.Result) -> None:
    """No packet crosses from one VPC to another, or leaves outside its VPC's routes."""
    if res.action not in (XdpAction.TX, XdpAction.REDIRECT):
        return
    out = Ether(res.data)
    if res.reason == Reason.FWD_TO_STORAGE:
        vni = Ether(frame)[VXLAN].vni
        vpc = _vpc_of_vni(t, vni)
        assert vpc is not None and res.vpc_id == vpc.vpc_id
        ip = out[IP] if IP in out else out[IPv6]
        src, dst = ipaddress.ip_address(ip.src), ipaddress.ip_address(ip.dst)
        sf = vpc.sf4 if src.version == 4 else vpc.sf6
        assert sf is not None and src in sf, "left with another VPC's (or no) storage address"
        routes = [r for r in t.routes if r.vpc_id == vpc.vpc_id and r.prefix.version == dst.version]
        best = max(
            (r for r in routes if dst in r.prefix), key=lambda r: r.prefix.prefixlen, default=None
        )
        assert best is not None and best.action == 1, "forwarded outside the VPC's routes"
        # decapsulated: what leaves is the inner frame (scapy's `VXLAN in out` cannot say: it
        # reads any inner UDP to or from 4789, 4790, 6633 or 8472 as VXLAN too)
        inner = bytes(Ether(frame)[VXLAN].payload)
        assert len(res.data) == len(inner) and res.data[12:14] == inner[12:14]
    else:
        assert res.reason == Reason.FWD_TO_COMPUTE
        vni = out[VXLAN].vni
        vpc = _vpc_of_vni(t, vni)
        assert vpc is not None and vpc.vpc_id == res.vpc_id
        inner = out[VXLAN].payload
        ip = inner[IP] if IP in inner else inner[IPv6]
        host = next(
            (
                h
                for h in t.hosts
                if h.vpc_id == vpc.vpc_id and h.addr == ipaddress.ip_address(ip.dst)
            ),
            None,
        )
        assert host is not None, "encapsulated toward an address that is not a host of the VNI"
        assert out[IP].dst == str(host.vtep)
        orig = Ether(frame)
        odst = ipaddress.ip_address((orig[IP] if IP in orig else orig[IPv6]).dst)
        sf = next(
            s
            for s in t.storage_facing
            if s.vpc_id == vpc.vpc_id and s.prefix.version == odst.version
        )
        assert odst in sf.prefix, "reply encapsulated with the VNI of another VPC"


@SETTINGS
@given(frame=frames())
def test_tenants_stay_isolated(runner, frame):
    res, _ = _verdict(frame, runner, runner.tables)
    if res is not None:
        assert_isolated(runner.tables, frame, res)


def _valid_frames():
    from scapy.layers.inet import TCP, UDP

    from packet_fixtures import PAYLOAD, storage_reply, vxlan

    return [
        bytes(vxlan(IP(src="192.168.1.10", dst="172.16.5.5") / TCP(sport=1, dport=2) / PAYLOAD)),
        bytes(
            vxlan(IPv6(src="fd00:a::10", dst="fd10::5") / UDP(sport=1, dport=2) / PAYLOAD, vlan=5)
        ),
        bytes(storage_reply("100.64.1.10")),
        bytes(storage_reply("fd64:a::10", src="fd10::5")),
    ]


def test_truncated_at_every_offset(runner):
    """Every prefix of a valid frame: same verdict, reason and bytes in program and model."""
    n = 0
    for frame in _valid_frames():
        for cut in range(14, len(frame) + 1):
            part = frame[:cut]
            k = runner.run(part)
            m = model.process(part, runner.tables, LOOPBACK_IFINDEX)
            assert (k.action, k.reason, k.data) == (m.action, m.reason, m.data), cut
            n += 1
    assert n > 400
