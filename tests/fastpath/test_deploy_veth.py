"""The fast path attached to real veth ports, with real frames: both directions, a 9000-byte
underlay MTU, replacing the program under its pinned maps, and a detach that leaves nothing."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.packet import Raw

from crosszone.abi import layout as L
from crosszone.compile.diff import MapOp
from crosszone.compile.encode import bind_ports, encode_tables
from crosszone.compile.tables import compile_tables
from crosszone.fastpath import deploy
from crosszone.fastpath.libbpf import xdp_query_prog_id
from crosszone.fastpath.sink import MapSink
from crosszone.fastpath.testing import model
from crosszone.intent.cluster import load_cluster
from crosszone.linux.netns import in_netns

from packet_fixtures import storage_reply, vxlan
from veth_topology import gateway_between

ETH_P_ALL = 0x0003


@pytest.fixture()
def topo(tmp_path, bpffs):
    """host ns (h0) -- gateway ns (c0 | s0) -- storage ns (st0), MTU 9000."""
    with gateway_between("czfp", tmp_path, bpffs, mtu=9000) as t:
        yield t


class Port:
    """A raw AF_PACKET socket on one interface of one namespace."""

    def __init__(self, netns: str, dev: str) -> None:
        with in_netns(netns):
            self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            self.sock.bind((dev, 0))
        self.sock.settimeout(2.0)

    def send(self, frame: bytes) -> None:
        self.sock.send(frame)

    def recv(self, min_len: int = 60) -> bytes:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            data, addr = self.sock.recvfrom(65535)
            if addr[2] != socket.PACKET_OUTGOING and len(data) >= min_len:
                return data
        raise TimeoutError("no frame")

    def close(self) -> None:
        self.sock.close()


def _expected(intent: Path, netns: str, frame: bytes) -> model.Result:
    with in_netns(netns):
        bound = bind_ports(compile_tables(load_cluster(intent), "gw-a"), socket.if_nametoindex)
        ingress = socket.if_nametoindex("c0" if b"\x12\xb5" in frame[34:38] else "s0")
    return model.process(frame, bound, ingress)


def _stale_route(pin: Path) -> bytes:
    """Put a route no intent has into the pinned maps; returns its key."""
    key = bytes(L.CzRoute4Key(vpc_id=0, plen=32, addr=0x0A090909))
    MapSink(deploy.pinned_maps(pin)).apply(
        MapOp("put", "routes4", [key], [bytes(L.CzRoute(action=L.CZ_ACT_BLACKHOLE))]))
    assert key in MapSink(deploy.pinned_maps(pin)).read({})["routes4"]
    return key


def test_both_directions_jumbo_replace_and_detach(topo):
    ns, intent, pin = topo
    deploy.attach(intent, pin, ns["gw"])
    with in_netns(ns["gw"]):
        assert xdp_query_prog_id(socket.if_nametoindex("c0"))
        assert xdp_query_prog_id(socket.if_nametoindex("s0"))
    with in_netns(ns["h"]):
        assert xdp_query_prog_id(socket.if_nametoindex("h0")), "peer needs XDP for redirect"
    host, storage = Port(ns["h"], "h0"), Port(ns["st"], "st0")
    try:
        frames = [
            bytes(
                vxlan(
                    IP(src="192.168.1.10", dst="172.16.5.5")
                    / TCP(sport=40000, dport=80)
                    / Raw(b"x" * 1400)
                )
            ),
            # 9000-byte underlay frame: 8950-byte inner IP packet.
            bytes(
                vxlan(
                    IP(src="192.168.1.10", dst="172.16.5.6")
                    / TCP(sport=40001, dport=80)
                    / Raw(b"y" * (8950 - 40))
                )
            ),
        ]
        assert len(frames[1]) == 9014
        for frame in frames:
            host.send(frame)
            got = storage.recv()
            assert got == _expected(intent, ns["gw"], frame).data
        reply = bytes(storage_reply("100.64.1.10") / Raw(b"z" * (8950 - 40 - 104)))
        storage.send(reply)
        got = host.recv()
        assert got == _expected(intent, ns["gw"], reply).data and len(got) == 9014

        # Attach again (an upgrade): the program is replaced, the pinned tables are reused and
        # reconciled by diff: an entry the intent does not have (left by hand) is deleted.
        maps_before = {p.name: p.stat().st_ino for p in (pin / "maps").iterdir()}
        stale = _stale_route(pin)
        deploy.attach(intent, pin, ns["gw"])
        assert {p.name: p.stat().st_ino for p in (pin / "maps").iterdir()} == maps_before
        held = MapSink(deploy.pinned_maps(pin)).read({})
        assert stale not in held["routes4"]
        with in_netns(ns["gw"]):
            bound = bind_ports(compile_tables(load_cluster(intent), "gw-a"),
                               socket.if_nametoindex)
        wanted = encode_tables(bound)
        assert dict(held["routes4"]) == dict(wanted["routes4"])
        host.send(frames[0])
        assert storage.recv() == _expected(intent, ns["gw"], frames[0]).data
        stats = deploy.pinned_maps(pin).reason_stats()
        assert stats[model.Reason.FWD_TO_STORAGE][0] >= 3
        assert stats[model.Reason.FWD_TO_COMPUTE][0] >= 1
    finally:
        host.close()
        storage.close()

    assert deploy.detach(pin) >= 4
    assert not pin.exists()
    for where, dev in (("gw", "c0"), ("gw", "s0"), ("h", "h0"), ("st", "st0")):
        with in_netns(ns[where]):
            assert not xdp_query_prog_id(socket.if_nametoindex(dev)), dev
