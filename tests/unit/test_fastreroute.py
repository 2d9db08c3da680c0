"""The routers' fast reroute: when it takes a gateway out, when it puts it back, what it edits."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from crosszone_lab.emulate.fastreroute import Detector, Peer, echo_request, parse_reply
from crosszone_lab.emulate.multipath_routes import Routes

IV, M = 0.005, 4  # 5 ms, down after 4 unanswered


def _det(n: int = 2) -> Detector:
    d = Detector([Peer(f"g{i}", f"10.0.{i}.1", 100 + i) for i in range(1, n + 1)], IV, M, 0.5)
    d.start(0.0)
    return d


def _run(d: Detector, t0: float, t1: float, answer: set[int]) -> list[tuple[float, str, str]]:
    """Ticks from t0 to t1; the peers in `answer` (idents) answer each echo before the next."""
    out, t = [], t0
    while t < t1 - 1e-9:
        for ident in answer:
            d.reply(ident, t)
        out += [(t, what, p.dev) for what, p in d.tick(t)]
        t = round(t + IV, 6)
    return out


def test_answering_gateways_stay_in() -> None:
    d = _det()
    assert _run(d, 0.0, 2.0, {101, 102}) == []


def test_a_silent_gateway_goes_out_after_multiplier_unanswered_echoes_and_not_before() -> None:
    d = _det()
    assert _run(d, 0.0, 1.0, {101, 102}) == []
    ev = _run(d, 1.0, 1.2, {102})  # g1 stops answering at 1.0
    assert [(w, g) for _t, w, g in ev] == [("down", "g1")]
    # its last answer was read at 1.0 (the echo sent at 0.995): 4 echoes unanswered by 1.02
    assert ev[0][0] == pytest.approx(1.0 + M * IV, abs=IV / 2)


def test_a_stall_of_the_prober_itself_takes_nothing_down() -> None:
    """No tick for 400 ms (the CPU froze); on waking the queued answers are read first."""
    d = _det()
    _run(d, 0.0, 1.0, {101, 102})
    for ident in (101, 102):
        d.reply(ident, 1.4)
    assert d.tick(1.4) == [] and d.late_ticks == 1
    assert _run(d, 1.405, 1.6, {101, 102}) == []


def test_a_gateway_comes_back_after_unbroken_answers_for_restore() -> None:
    d = _det()
    _run(d, 0.0, 0.5, {101, 102})
    assert [w for _t, w, _g in _run(d, 0.5, 0.6, {102})] == ["down"]
    # answers again, but one gap of 3 echoes in the middle restarts the 0.5 s count
    assert _run(d, 0.6, 0.9, {101, 102}) == []
    assert _run(d, 0.9, 0.915, {102}) == []
    ev = _run(d, 0.915, 2.0, {101, 102})
    assert [(w, g) for _t, w, g in ev] == [("up", "g1")]
    assert ev[0][0] >= 0.915 + 0.5


def test_echo_request_is_a_valid_icmp_echo_and_replies_parse() -> None:
    pkt = echo_request(0xC201, 7)
    assert pkt[0] == 8 and int.from_bytes(pkt[4:6], "big") == 0xC201
    s = sum(int.from_bytes(pkt[i:i + 2], "big") for i in range(0, len(pkt), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    assert s == 0xFFFF  # the checksum covers the message
    ip = bytes([0x45]) + bytes(19)
    reply = bytes([0, 0]) + pkt[2:]
    assert parse_reply(ip + reply) == 0xC201
    assert parse_reply(ip + pkt) is None  # a request is not an answer
    assert parse_reply(b"\x45" + bytes(10)) is None  # cut short


# ---- the routes, in a private namespace ----------------------------------------------------


def _ip(ns: str, *argv: str) -> str:
    return subprocess.run(["ip", "-n", ns, *argv], check=True, capture_output=True,
                          text=True).stdout


@pytest.fixture
def ns() -> Iterator[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root (a network namespace)")
    name = f"czfrr-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        for i in (1, 2, 3):
            _ip(name, "link", "add", f"g{i}", "type", "veth", "peer", "name", f"p{i}")
            _ip(name, "addr", "add", f"10.99.{i}.1/24", "dev", f"g{i}")
            _ip(name, "-6", "addr", "add", f"fd99:{i}::1/64", "dev", f"g{i}", "nodad")
            for dev in (f"g{i}", f"p{i}"):
                _ip(name, "link", "set", dev, "up")
        _ip(name, "route", "add", "10.123.0.0/16", "proto", "bgp", "metric", "20",
            "nexthop", "via", "10.99.1.2", "dev", "g1", "weight", "1",
            "nexthop", "via", "10.99.2.2", "dev", "g2", "weight", "3",
            "nexthop", "via", "10.99.3.2", "dev", "g3", "weight", "1")
        _ip(name, "-6", "route", "add", "fd64:a::/64", "proto", "bgp", "metric", "20",
            "nexthop", "via", "fd99:1::2", "dev", "g1", "nexthop", "via", "fd99:2::2", "dev", "g2")
        _ip(name, "route", "add", "10.124.0.0/16", "via", "10.99.1.2", "dev", "g1",
            "proto", "bgp", "metric", "20")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def _hops(ns: str, prefix: str, six: bool = False) -> set[str]:
    out = _ip(ns, *(["-6"] if six else []), "route", "show", prefix)
    return {w for line in out.splitlines() for w in line.split() if w.startswith("g")}


def test_drop_takes_the_gateway_out_of_every_route_but_a_last_hop_and_restore_puts_it_back(
        ns: str) -> None:
    r = Routes(ns)
    try:
        g1, g2 = r.ifindex("g1"), r.ifindex("g2")
        assert r.drop(g1) == 2  # the IPv4 and IPv6 multipath routes; 10.124/16 has no other hop
        assert _hops(ns, "10.123.0.0/16") == {"g2", "g3"}
        assert "weight 3" in _ip(ns, "route", "show", "10.123.0.0/16")  # weights kept
        assert _hops(ns, "fd64:a::/64", six=True) == {"g2"}
        assert _hops(ns, "10.124.0.0/16") == {"g1"}
        assert "proto bgp metric 20" in _ip(ns, "route", "show", "10.123.0.0/16")
        # zebra no longer has g1 for the IPv6 prefix (BGP withdrew it meanwhile): not put back
        assert r.restore(g1, lambda key: key.startswith(f"{socket.AF_INET}/")) == 1
        assert _hops(ns, "10.123.0.0/16") == {"g1", "g2", "g3"}
        assert _hops(ns, "fd64:a::/64", six=True) == {"g2"}
        assert r.removed == {}
        assert r.drop(g2) == 1 and _hops(ns, "10.123.0.0/16") == {"g1", "g3"}
        assert r.drop(g2) == 0  # idempotent
        # the routes are kept between decisions; a change the kernel reports is read again
        r.warm()
        _ip(ns, "-6", "route", "replace", "fd64:a::/64", "proto", "bgp", "metric", "20",
            "nexthop", "via", "fd99:2::2", "dev", "g2", "nexthop", "via", "fd99:3::2", "dev", "g3")
        r.invalidate()
        assert r.drop(r.ifindex("g3")) == 2
        assert _hops(ns, "fd64:a::/64", six=True) == {"g2"} and _hops(ns, "10.123.0.0/16") == {"g1"}
    finally:
        r.close()


def test_one_decision_over_many_routes_changes_each_and_reports_the_refused(ns: str) -> None:
    """Every changed route goes out in one datagram; a route the kernel refuses is named."""
    for i in range(40):
        _ip(ns, "route", "add", f"10.200.{i}.0/24", "proto", "bgp", "metric", "20",
            "nexthop", "via", "10.99.1.2", "dev", "g1", "nexthop", "via", "10.99.2.2", "dev", "g2")
    r = Routes(ns)
    try:
        g1 = r.ifindex("g1")
        assert r.drop(g1) == 42 and r.errors == []  # 40 + 10.123/16 + fd64:a::/64
        assert all(_hops(ns, f"10.200.{i}.0/24") == {"g2"} for i in range(40))
        # g2's link goes away under the cached routes: the kernel refuses those replaces
        r.warm()
        _ip(ns, "link", "set", "g2", "down")
        assert r.restore(g1, lambda key: True) == 0  # every route has g2, which is down
        assert len(r.errors) == 42, r.errors  # IPv4: ENETUNREACH, IPv6: EHOSTUNREACH
        assert {e for _k, e in r.errors} == {"ENETUNREACH", "EHOSTUNREACH"}
        assert {k for k, _e in r.errors} >= {f"2/10.200.{i}.0/24" for i in range(40)}
    finally:
        r.close()


def test_encoded_replace_is_what_pyroute2_parses() -> None:
    """The hand-built message decodes, field by field, as the kernel's rtmsg."""
    from pyroute2.netlink.rtnl.rtmsg import rtmsg

    from crosszone_lab.emulate.multipath_routes import (
        Route,
        encode_replace,
        parse_acks,
        parse_route,
    )

    route = Route(family=socket.AF_INET6, dst="fd64:a::", dst_len=64, proto=186, scope=0,
                  rtype=1, priority=20, hops=((7, "fd99:1::2", 2), (9, "fd99:2::2", 0)))
    msg = rtmsg(encode_replace(route, seq=5))
    msg.decode()
    assert msg["header"]["sequence_number"] == 5 and msg["header"]["flags"] == 0x505
    assert (msg["family"], msg["dst_len"], msg["proto"]) == (socket.AF_INET6, 64, 186)
    assert msg.get_attr("RTA_DST") == "fd64:a::" and msg.get_attr("RTA_PRIORITY") == 20
    assert msg.get_attr("RTA_TABLE") == 254
    hops = [(h["oif"], h["hops"], h.get_attr("RTA_GATEWAY")) for h in msg.get_attr("RTA_MULTIPATH")]
    assert hops == [(7, 2, "fd99:1::2"), (9, 0, "fd99:2::2")]
    one = rtmsg(encode_replace(Route(socket.AF_INET, "10.1.0.0", 16, 186, 0, 1, None,
                                     ((3, "10.9.9.9", 0),)), seq=6))
    one.decode()
    assert one.get_attr("RTA_OIF") == 3 and one.get_attr("RTA_GATEWAY") == "10.9.9.9"
    assert one.get_attr("RTA_MULTIPATH") is None and one.get_attr("RTA_PRIORITY") is None
    # and the dump's parser reads back what was encoded (table from RTA_TABLE)
    raw = encode_replace(route, seq=7)
    assert parse_route(raw, 0, len(raw)) == (254, route)
    static = Route(socket.AF_INET, "10.2.0.0", 16, 4, 0, 1, None, ((3, "10.9.9.9", 0),))
    raw = encode_replace(static, seq=8)
    assert parse_route(raw, 0, len(raw)) is None  # a static single hop is never edited
    assert parse_route(raw[:30], 0, 30) is None  # truncated
    # acknowledgements: NLMSG_ERROR with 0 (done) or a negative errno, by sequence number
    import struct
    ack = struct.pack("=IHHIIi", 20, 2, 0, 5, 0, 0) + struct.pack("=IHHIIi", 20, 2, 0, 6, 0, -19)
    assert parse_acks(ack) == {5: 0, 6: 19}
    assert parse_acks(b"\x01\x00") == {} and parse_acks(struct.pack("=IHHII", 4, 2, 0, 1, 0)) == {}


def test_every_path_quiet_at_once_takes_nothing_down_one_quiet_path_does() -> None:
    """The router's own packet processing deferred (no answer from any gateway for 60 ms while
    the prober runs on time) is not a gateway failure; one gateway quiet while another answers
    is."""
    d = _det(3)
    _run(d, 0.0, 1.0, {101, 102, 103})
    assert _run(d, 1.0, 1.06, set()) == []  # 12 echoes each unanswered, no witness
    assert _run(d, 1.06, 1.5, {101, 102, 103}) == []  # the late answers arrive: all still in
    ev = _run(d, 1.5, 1.6, {102, 103})
    assert [(w, g) for _t, w, g in ev] == [("down", "g1")]
    # with g1 out, g2 and g3 going quiet together still has no witness: nothing more goes out
    assert _run(d, 1.6, 1.7, set()) == []
    # but g2 alone going quiet while g3 answers does
    assert [(w, g) for _t, w, g in _run(d, 1.7, 1.8, {103})] == [("down", "g2")]
