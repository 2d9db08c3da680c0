"""A packet sees a whole record while the control plane changes it (issue 12, finding 14).

A writer process flips a VPC record and the next-hop records between two valid versions through
the production path (`fastpath.sink.program`: diff, then the double-buffered `RecordMap` puts)
while this process runs the same frame through the kernel program with BPF_PROG_TEST_RUN on
the other CPU. Version A and version B each give one known output frame; a packet that read part
of one and part of the other gives another (the two versions differ in the VPC's prefix, mask
and storage-facing prefix, read at the start and at the end of the translation, and in the next
hop's two MACs, copied one after the other), or a drop. A change writes the VPC and the next
hops one map after the other, so a packet may combine the VPC of one version with the next hops
of the other; every output must be one of those four combinations of whole records.

What this test can and cannot show: a torn read needs the kernel's memcpy of a record to land
inside one packet's few hundred nanoseconds between its first and last read of it. With a
writer in Python (one put every tens of microseconds) that is rare: writing the live copy in
place (the old behaviour) through the same loop gave no mixed output in 20,000 packets here. So
this test is the end-to-end check that the double-buffered path forwards and never mixes; the
tests that fail without the fix are the writer-protocol ones (tests/unit/test_sink.py: a copy
that is live or was live less than a grace period ago is never written; the slot-table cases:
a deleted slot is reused only after a grace period).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections import Counter

import pytest
from scapy.layers.inet import IP, TCP

from crosszone.abi import layout as L
from crosszone.fastpath.grace import Grace
from crosszone.fastpath.libbpf import xdp_ctx
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.sink import program
from crosszone.fastpath.testing.testrun import TestRunner

from packet_fixtures import HOST_A1, tables, vxlan

RUN_SECONDS = 4.0


def _u32(i: int) -> bytes:
    return i.to_bytes(4, "little")


def _vpc_b(raw: bytes) -> bytes:
    """Version B of a VPC record: 192.168.1.0/24 -> 100.99.8.0/24 instead of 192.168.0.0/16 ->
    100.64.0.0/16. Host 192.168.1.10 is in both; any mix of the three fields drops it or gives
    a source address neither version gives (100.99.9.10, 100.64.0.10)."""
    v = L.CzVpc.from_buffer_copy(raw)
    for field, addr in (("prefix4", (192, 168, 1, 0)), ("mask4", (255, 255, 255, 0)),
                        ("sf4", (100, 99, 8, 0))):
        setattr(v, field, (ctypes.c_uint8 * 4)(*addr))
    return bytes(v)


def _slow(raw: bytes) -> bytes:
    """A VPC record that tries every IPv4 prefix length, longest first: the same routes match,
    but the route walk between the first reads of the record (the source check) and the last
    (the translation) takes 33 probes, which widens the window a torn read would need."""
    v = L.CzVpc.from_buffer_copy(raw)
    v.n_plens4 = L.CZ_MAX_PLENS4
    v.plens4 = (ctypes.c_uint8 * L.CZ_MAX_PLENS4)(*range(32, -1, -1))
    return bytes(v)


def _nexthop_b(raw: bytes) -> bytes:
    """Version B of a next hop: both MACs changed (a mix shows as one old and one new MAC)."""
    n = L.CzNexthop.from_buffer_copy(raw)
    for field in ("mac", "smac"):
        mac = bytes(getattr(n, field))
        setattr(n, field, (ctypes.c_uint8 * 6)(*mac[:5], mac[5] ^ 0x55))
    return bytes(n)


def _writer(maps: dict, a: dict, b: dict, seconds: float, out_fd: int, cpu: int) -> None:
    """The child: flip every record between a and b as fast as the writer goes (its puts
    directly, no diff: the more flips, the more chances for a packet to catch one)."""
    os.sched_setaffinity(0, {cpu})
    gm = GatewayMaps(maps, grace=Grace())  # the parent's grace thread does not exist here
    flips = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for version in (b, a):
            for name, entries in version.items():
                gm.maps[name].update_batch(list(entries), list(entries.values()))
        flips += 2
    os.write(out_fd, str(flips).encode())


def test_every_packet_sees_one_whole_version_while_a_writer_flips_records(gateway_object):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.fail("the race needs two CPUs: a reader and a writer running at the same time")
    frame = bytes(vxlan(IP(src=HOST_A1["ip"], dst="172.16.5.9") / TCP(sport=4000, dport=443)))
    with TestRunner(tables(), gateway_object) as r:
        vpc_id = next(v.vpc_id for v in r.tables.vpcs if v.vni == 1001)
        vpcs, nexthops = r.maps.maps["vpcs"], r.maps.maps["nexthops"]
        nh_ids = [n.nh_id for n in r.tables.nexthops]
        a = {"vpcs": {_u32(vpc_id): _slow(vpcs.lookup(_u32(vpc_id)))},
             "nexthops": {_u32(i): nexthops.lookup(_u32(i)) for i in nh_ids}}
        b = {"vpcs": {k: _vpc_b(v) for k, v in a["vpcs"].items()},
             "nexthops": {k: _nexthop_b(v) for k, v in a["nexthops"].items()}}
        ctx = xdp_ctx(r.ingress_ifindex)

        def run() -> bytes:
            return bytes(r.prog.test_run(frame, ctx=ctx).data_out)

        # The outputs of whole records: each of the four combinations of VPC and next-hop
        # versions (one change writes them one map after the other, so a packet may see the
        # new next hops with the old VPC: records are atomic each, a change is not).
        whole = {}
        for vpc in (a, b):
            for nh in (a, b):
                mixed_in = {"vpcs": vpc["vpcs"], "nexthops": nh["nexthops"]}
                program(r.maps, mixed_in, a)
                whole[run()] = (vpc is b, nh is b)
                assert r.run(frame).reason.name == "FWD_TO_STORAGE"
                program(r.maps, a, mixed_in)
        assert len(whole) == 4
        program(r.maps, a, {})
        out_a, out_b = run(), next(o for o, w in whole.items() if w == (True, True))

        rd, wr = os.pipe()
        pid = os.fork()
        if pid == 0:  # the writer; never returns into pytest
            try:
                os.close(rd)
                _writer(r.obj.maps, a, b, RUN_SECONDS, wr, cpus[1])
            finally:
                os._exit(0)
        os.close(wr)
        seen: Counter[bytes] = Counter()
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {cpus[0]})
        try:
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                seen[run()] += 1
        finally:
            os.sched_setaffinity(0, saved)
            flips = int(os.read(rd, 64) or b"0")
            os.close(rd)
        mixed = sum(n for out, n in seen.items() if out not in whole)
        total = sum(seen.values())
        assert flips >= 40, f"the writer flipped only {flips} times"
        print(f"{total} packets, {flips} flips, {seen[out_a]} saw A, {seen[out_b]} saw B")
        assert seen[out_a] and seen[out_b], "the reader never saw one of the versions"
        assert mixed == 0, f"{mixed} of {total} packets saw a mix of two versions ({flips} flips)"
