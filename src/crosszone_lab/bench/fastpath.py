"""`crosszone bench fastpath --json`: per-packet cost of the fast path against its floor.

Method. Each figure is BPF_PROG_TEST_RUN with `repeat N` on one frame, in two modes, each on
its own bench build of the programs (see bpf/bench_harness.h):

- `live_frames` (the headline): BPF_F_TEST_XDP_LIVE_FRAMES, batches of 64. Each iteration is a
  page-pool frame the kernel hands to XDP as a driver would, and an XDP_TX'd frame goes through
  the kernel's transmit path (here towards lo, which drops it), so the figures include what
  forwarding costs per packet, not only the program. The kernel resets the data pointers of a
  recycled frame but not its bytes, so the harness puts back the bytes the program rewrote.
- `test_run_restore_harness`: plain test runs, which replay the program on the buffer the last
  iteration left; the harness moves the data pointer back and restores the first 128 bytes.
  No transmission: these are processing costs only, and the harness' pointer move is a helper
  call the decapsulating program pays and the floor does not.

The floor, a MAC swap returning XDP_TX, carries the same harness in both. Freshness is checked,
not assumed: the program's reason counters must grow by exactly the number of iterations, all
under the scenario's expected reason (a stale frame is counted under another).

Live frames are not everywhere: kernels before 5.18 lack them and a security policy (a BPF LSM)
may refuse them. One probe (fastpath/live_frames.py) decides; where refused, every live
scenario prints `{"scenario": ..., "mode": "live_frames", "unavailable": "<errno: reason>"}`
and the restore-harness lines follow as usual. The last line is a summary saying which modes
ran.

Each scenario is measured in interleaved rounds (floor, program, LPM-trie baseline) on the same
frame and CPU; the median of the rounds is reported with the ratios, and the fastest round of
each (`best_*`) with theirs. Nothing here is a test.

Ceiling (`ipv4_decap_1m_routes` only). The LPM-trie build is the gateway with its route lookup
swapped for the trie's, so `lpm_trie_over_this` = (P - s + t) / P for a gateway costing P whose
own lookup costs s, with t the trie lookup. That falls as P grows, and every gateway costs at
least D, the decap floor (harness, strip 50 bytes, write MACs, XDP_TX: bench_floor_decap). So no
gateway can show more than (D + t) / D, and D + t is measured directly by the same floor with
one lookup in the same 1M-route trie (bench_floor_decap_lpm). `lpm_trie_over_this_ceiling`
prints that bound for the run: a target above it is out of reach for any program in that mode.
"""

from __future__ import annotations

import ipaddress
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from crosszone.abi import layout as L
from crosszone.abi.objects import BUILD_DIR
from crosszone.abi.reasons import Reason
from crosszone.compile.encode import RouteArrays, encode_hosts, encode_route_arrays, encode_tables
from crosszone.compile.tables import Group, HostEntry, Nexthop, Port, StorageFacing, Tables, Vpc
from crosszone.fastpath.libbpf import BPF_F_TEST_XDP_LIVE_FRAMES, BpfObject, xdp_ctx
from crosszone.fastpath.live_frames import probe
from crosszone.fastpath.maps_io import GatewayMaps
from crosszone.fastpath.sink import program
from crosszone_lab.bench.fastpath_policy import POLICY_SCENARIOS, clock_costs, policy_scenarios

LOOPBACK = 1  # test runs claim frames arrive on lo; the port is lo too, so forwarding is XDP_TX
COMPUTE_IFINDEX_OFFSET = 1000  # a distinct ifindex for the compute port; its devmap slot is lo
LIVE_BATCH = 64  # frames per live-frames batch (the kernel's default)
#: (mode label, object name suffix, live frames): live frames first, the headline figures.
MODES = (("live_frames", "_live", True), ("test_run_restore_harness", "", False))
BUILD = BUILD_DIR
#: The scenarios of one mode, in the order they are printed.
SCENARIOS = ("ipv4_decap_1m_routes", "miss_drop", "ipv4_decap_1m_routes_spread",
             "ipv6_decap_1m_routes", "return_encap_100k_hosts")
PACKET_BYTES = 1514
VNI = 100
HOST_VTEP = "10.1.0.1"
GW_VTEP = "10.0.0.100"
MAC_A, MAC_B = bytes.fromhex("020000000a01"), bytes.fromhex("020000000a02")

# IPv4 route set: (prefix length, first network, count); 1M routes over 5 lengths, disjoint.
ROUTES4 = (
    (24, 0x10000000, 680_000),
    (32, 0x60000000, 100_000),
    (28, 0x61000000, 100_000),
    (20, 0x62000000, 100_000),
    (16, 0xA0000000, 20_000),
)
# IPv6: (prefix length, first network as a 64-bit high half, step in the high half, count).
ROUTES6 = (
    (56, 0x20010DB800000000, 1 << 8, 680_000),
    (128, 0x20010DB900000000, 0, 100_000),
    (64, 0x20010DBA00000000, 1, 100_000),
    (48, 0x20010DBB00000000, 1 << 16, 100_000),
    (32, 0x3000000000000000, 1 << 32, 20_000),
)
DST4 = "16.0.5.7"  # matches only a /24: probes /32, /28, then hits /24
DST6 = "2001:db8:0:500::7"  # matches only a /56: probes /128, /64, then hits /56
MISS4 = "250.0.0.1"


def _scaled(spec: tuple, total: int) -> list[tuple]:
    full = sum(s[-1] for s in spec)
    return [s[:-1] + (max(1, s[-1] * total // full),) for s in spec]


def route_arrays4(total: int) -> RouteArrays:
    """The IPv4 route set scaled to `total` routes (all in VPC 0, group 0)."""
    plen, addr = [], []
    for length, first, count in _scaled(ROUTES4, total):
        plen.append(np.full(count, length, np.uint32))
        addr.append(first + np.arange(count, dtype=np.uint64) * (1 << (32 - length)))
    p, a = np.concatenate(plen), np.concatenate(addr).astype(np.uint32)
    n = len(p)
    return RouteArrays(
        4,
        np.zeros(n, np.uint32),
        p,
        a,
        None,
        np.full(n, L.CZ_ACT_FORWARD, np.uint32),
        np.zeros(n, np.uint32),
    )


def route_arrays6(total: int) -> RouteArrays:
    """The IPv6 route set scaled to `total` routes."""
    plen, hi, lo = [], [], []
    for length, first, step, count in _scaled(ROUTES6, total):
        i = np.arange(count, dtype=np.uint64)
        plen.append(np.full(count, length, np.uint32))
        hi.append(np.uint64(first) + i * np.uint64(step))
        lo.append(i if length == 128 else np.zeros(count, np.uint64))
    p = np.concatenate(plen)
    n = len(p)
    return RouteArrays(
        6,
        np.zeros(n, np.uint32),
        p,
        np.concatenate(hi),
        np.concatenate(lo),
        np.full(n, L.CZ_ACT_FORWARD, np.uint32),
        np.zeros(n, np.uint32),
    )


def bench_tables(ifindex: int) -> Tables:
    """One VPC; storage port = the ingress device, so decap is XDP_TX like the floor. A reply may
    not arrive on the compute port, so that one has its own (unused) ifindex: replies redirect."""
    port = Port(0, "bench0", "storage", MAC_A, MAC_B, ifindex)
    compute = Port(1, "bench1", "compute", MAC_A, MAC_B, ifindex + COMPUTE_IFINDEX_OFFSET)
    vpc = Vpc(
        0,
        VNI,
        "bench",
        ipaddress.IPv4Network("10.0.0.0/8"),
        ipaddress.IPv4Network("44.0.0.0/8"),
        ipaddress.IPv6Network("fd00::/64"),
        ipaddress.IPv6Network("fd64::/64"),
        False,
        MAC_B,
        tuple(sorted({s[0] for s in ROUTES4}, reverse=True)),
        tuple(sorted({s[0] for s in ROUTES6}, reverse=True)),
    )
    sf = StorageFacing(
        ipaddress.ip_network("44.0.0.0/8"), 0, VNI, ipaddress.ip_network("10.0.0.0/8"), MAC_B, False
    )
    return Tables(
        vtep=ipaddress.IPv4Address(GW_VTEP),
        compute_port=1,
        ports=(port, compute),
        vpcs=(vpc,),
        vteps=frozenset({(VNI, ipaddress.IPv4Address(HOST_VTEP))}),
        routes=(),
        groups=(Group(0, "g", (0,), (0,) * L.CZ_ECMP_BUCKETS),),
        nexthops=(Nexthop(0, "nh", 0, MAC_B),),
        storage_facing=(sf,),
        hosts=(),
    )


def vxlan_frame(inner_dst: str) -> bytes:
    """A 1514-byte VXLAN frame from the host VTEP to the gateway, inner TCP."""
    from scapy.layers.inet import IP, TCP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.layers.vxlan import VXLAN

    six = ":" in inner_dst
    inner = IPv6(src="fd00::10", dst=inner_dst) if six else IP(src="10.0.0.10", dst=inner_dst)
    inner = inner / TCP(sport=40000, dport=443)
    outer = (
        Ether(src=MAC_B, dst=MAC_A)
        / IP(src=HOST_VTEP, dst=GW_VTEP)
        / UDP(sport=50000, dport=4789)
        / VXLAN(vni=VNI)
        / Ether(src=MAC_B, dst=MAC_A)
    )
    pad = PACKET_BYTES - len(outer / inner)
    return bytes(outer / inner / (b"\0" * pad))


def reply_frame(host_index: int) -> bytes:
    """A storage reply to host #host_index's storage-facing address, sized to leave as 1514."""
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether

    dst = str(ipaddress.IPv4Address(0x2C000000 + host_index))
    pkt = Ether(src=MAC_B, dst=MAC_A) / IP(src=DST4, dst=dst) / TCP(sport=443, dport=40000)
    return bytes(pkt / (b"\0" * (PACKET_BYTES - 50 - len(pkt))))


@dataclass
class Loaded:
    """A program with its tables written."""

    obj: BpfObject
    maps: GatewayMaps | None
    prog_name: str
    live: bool = False

    def ns_per_pkt(self, frame: bytes, repeat: int) -> float:
        """Average ns per iteration, as the kernel timed it."""
        prog = self.obj.program(self.prog_name)
        flags = BPF_F_TEST_XDP_LIVE_FRAMES if self.live else 0
        res = prog.test_run(frame, ctx=xdp_ctx(LOOPBACK), repeat=repeat, flags=flags,
                            batch_size=LIVE_BATCH if self.live else 0)
        return float(res.duration_ns)

    def close(self) -> None:
        """Unload (and unmap the slot tables)."""
        if self.maps is not None:
            self.maps.close()
        self.obj.close()

    def count(self, reason: Reason) -> int:
        """Packets counted under a reason so far."""
        assert self.maps is not None
        return self.maps.reason_stats()[reason][0]

    def floor_hits(self) -> int:
        """Trie lookups that found a route so far (bench_floor_decap_lpm only)."""
        per_cpu = self.obj.map("floor_hits").lookup_percpu((0).to_bytes(4, "little"))
        return sum(int.from_bytes(raw[:8], "little") for raw in per_cpu)


def load_gateway(
    obj_name: str, tables: Tables, routes: RouteArrays | None = None, hosts: int = 0,
    live: bool = False,
) -> Loaded:
    """Load a gateway object and program the bench tables (+ bulk routes, + hosts)."""
    obj = BpfObject.open(BUILD / obj_name)
    maps = GatewayMaps.of(obj)
    entries = encode_tables(tables, [routes] if routes is not None else [],
                            devmap_ifindex=lambda p: LOOPBACK)
    if hosts:
        entries["hosts"].update(encode_hosts([
            HostEntry(
                0, ipaddress.IPv4Address(0x0A000000 + i), ipaddress.IPv4Address(HOST_VTEP), MAC_B
            )
            for i in range(hosts)
        ]))
    program(maps, entries)
    return Loaded(obj, maps, "cz_gateway", live)


def load_floor(obj_name: str, live: bool = False) -> Loaded:
    """Load a floor object (no gateway tables)."""
    return Loaded(BpfObject.open(BUILD / obj_name), None, "cz_floor", live)


def _loader(sfx: str, live: bool, routes: RouteArrays) -> Callable[[str, Tables, int], Loaded]:
    """load(object stem, tables, hosts) of one mode, every copy with the same routes."""
    return lambda stem, t, n: load_gateway(f"{stem}{sfx}.o", t, routes, n, live)


def _clock_row(sfx: str, live: bool, frame: bytes, repeat: int, rounds: int,
               out: Callable[[dict], None], mode: str) -> None:
    """The `policy_clock_costs` line of one mode (bench/fastpath_policy.py)."""
    row = clock_costs(lambda stem: load_floor(f"{stem}{sfx}.o", live), frame, repeat, rounds)
    out({"scenario": "policy_clock_costs", "mode": mode, **row})


def _conditions(repeat: int, rounds: int) -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "kernel": platform.release(),
        "cpu": cpu,
        "packet_bytes": PACKET_BYTES,
        "repeat": repeat,
        "rounds": rounds,
    }


def measure(
    raw_floor: Loaded,
    frame: bytes,
    floor: Loaded,
    prog: Loaded,
    expected: Reason,
    repeat: int,
    rounds: int,
    lpm: Loaded | None = None,
    ceiling: tuple[Loaded, Loaded] | None = None,
) -> dict:
    """Interleaved rounds of floor / program / baseline (/ the two ceiling floors) on one
    frame: medians and checks."""
    f, p, b, raw, d, dt = [], [], [], [], [], []
    before = prog.count(expected)
    lpm_before = lpm.count(expected) if lpm else 0
    hits_before = ceiling[1].floor_hits() if ceiling else 0
    for _ in range(rounds):
        f.append(floor.ns_per_pkt(frame, repeat))
        raw.append(raw_floor.ns_per_pkt(frame, repeat))
        p.append(prog.ns_per_pkt(frame, repeat))
        if lpm is not None:
            b.append(lpm.ns_per_pkt(frame, repeat))
        if ceiling is not None:
            d.append(ceiling[0].ns_per_pkt(frame, repeat))
            dt.append(ceiling[1].ns_per_pkt(frame, repeat))
    ok = prog.count(expected) - before == repeat * rounds
    if lpm is not None:
        ok = ok and lpm.count(expected) - lpm_before == repeat * rounds
    if ceiling is not None:
        ok = ok and ceiling[1].floor_hits() - hits_before == repeat * rounds
    out: dict[str, object] = {
        "ns_per_pkt": round(statistics.median(p), 1),
        "floor_ns_per_pkt": round(statistics.median(f), 1),
    }
    ours, floor_ns = statistics.median(p), statistics.median(f)
    out["vs_floor"] = round(ours / floor_ns, 2)
    if lpm is not None:
        out["lpm_trie_ns_per_pkt"] = round(statistics.median(b), 1)
        out["lpm_trie_over_this"] = round(statistics.median(b) / ours, 2)
    # The fastest round of each: on a shared machine noise only ever adds time, so the minima
    # are the steadiest comparison; the medians above are the headline figures.
    out["best_ns_per_pkt"] = min(p)
    out["best_floor_ns_per_pkt"] = min(f)
    out["best_vs_floor"] = round(min(p) / min(f), 2)
    if lpm is not None:
        out["best_lpm_trie_ns_per_pkt"] = min(b)
        out["best_lpm_trie_over_this"] = round(min(b) / min(p), 2)
    if ceiling is not None:
        out["decap_floor_ns_per_pkt"] = round(statistics.median(d), 1)
        out["decap_floor_lpm_trie_ns_per_pkt"] = round(statistics.median(dt), 1)
        out["lpm_trie_over_this_ceiling"] = round(statistics.median(dt) / statistics.median(d), 2)
        out["best_lpm_trie_over_this_ceiling"] = round(min(dt) / min(d), 2)
    # The bare floor without the restore harness, for scale: the harness costs both sides alike.
    out["floor_without_harness_ns_per_pkt"] = round(statistics.median(raw), 1)
    out["expected_reason"] = expected.label
    out["every_iteration_verified"] = ok
    return out


def run_bench(
    routes: int = 1_000_000,
    hosts: int = 100_000,
    repeat: int = 1_000_000,
    rounds: int = 5,
    emit=print,
    policy_only: bool = False,
) -> list[dict]:
    """All scenarios (policy_only: the traffic policy's on/off scenarios alone); emit(json line)
    as each finishes. Returns the result objects."""
    results: list[dict] = []
    cond = _conditions(repeat, rounds)

    def out(obj: dict) -> None:
        obj.update(cond)
        results.append(obj)
        emit(json.dumps(obj))

    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    live = probe()
    modes = [m for m in MODES if live.allowed or not m[2]]
    if not live.allowed:
        names = () if policy_only else SCENARIOS
        for scenario in (*names, *POLICY_SCENARIOS, "policy_clock_costs"):
            out({"scenario": scenario, "mode": "live_frames",
                 "unavailable": live.unavailable()})
    tables = bench_tables(LOOPBACK)
    r4, r6 = route_arrays4(routes), route_arrays6(routes)
    fwd = Reason.FWD_TO_STORAGE
    frames = (vxlan_frame(DST4), vxlan_frame("16.0.0.7"), reply_frame(hosts // 2))
    if policy_only:
        for mode, sfx, is_live in modes:
            policy_scenarios(_loader(sfx, is_live, r4), tables, frames, hosts, repeat, rounds,
                             out, {"mode": mode, "routes": len(r4.plen)})
            _clock_row(sfx, is_live, frames[0], repeat, rounds, out, mode)
        _summary(results, live.unavailable(), emit, cond)
        return results

    # Programming speed: bulk arrays -> the slot table of an empty gateway, by the one path
    # (encode -> diff -> sink).
    prog = load_gateway("bench_gateway.o", tables)
    assert prog.maps is not None
    t0 = time.perf_counter()
    ops = program(prog.maps, {"routes4": encode_route_arrays(r4)[1]})
    secs = time.perf_counter() - t0
    n = sum(len(op) for op in ops)
    prog.close()
    out({"scenario": "program_routes", "routes": n, "seconds": round(secs, 3),
         "routes_per_s": round(n / secs)})

    for mode, sfx, is_live in modes:
        def gw(name: str, rt: RouteArrays | None = None, n_hosts: int = 0,
               sfx: str = sfx, is_live: bool = is_live) -> Loaded:
            return load_gateway(f"{name}{sfx}.o", tables, rt, n_hosts, is_live)

        floor = load_floor(f"bench_floor{sfx}.o", is_live)
        raw_floor = load_floor("xdp_floor.o", is_live)
        tag = {"mode": mode}

        prog, lpm = gw("bench_gateway", r4), gw("bench_gateway_lpm", r4)
        decap = load_floor(f"bench_floor_decap{sfx}.o", is_live)
        decap_lpm = load_floor(f"bench_floor_decap_lpm{sfx}.o", is_live)
        program(GatewayMaps.of(decap_lpm.obj), {"routes4": encode_route_arrays(r4)[1]})
        row = measure(raw_floor, vxlan_frame(DST4), floor, prog, fwd, repeat, rounds, lpm,
                      (decap, decap_lpm))
        out({"scenario": "ipv4_decap_1m_routes", "routes": len(r4.plen), **tag, **row})
        for o in (decap, decap_lpm):
            o.close()
        row = measure(raw_floor, vxlan_frame(MISS4), floor, prog, Reason.DROP_ROUTE_MISS,
                      repeat, rounds)
        out({"scenario": "miss_drop", "routes": len(r4.plen), **tag, **row})
        for o in (prog, lpm):
            o.close()

        sp, sp_lpm = gw("bench_gateway_spread", r4), gw("bench_gateway_lpm_spread", r4)
        row = measure(raw_floor, vxlan_frame("16.0.0.7"), floor, sp, fwd, repeat, rounds, sp_lpm)
        out({"scenario": "ipv4_decap_1m_routes_spread", "routes": len(r4.plen),
             "distinct_destinations": 100_000, **tag, **row})
        for o in (sp, sp_lpm):
            o.close()

        v6, v6_lpm = gw("bench_gateway", r6), gw("bench_gateway_lpm", r6)
        row = measure(raw_floor, vxlan_frame(DST6), floor, v6, fwd, repeat, rounds, v6_lpm)
        out({"scenario": "ipv6_decap_1m_routes", "routes": len(r6.plen), **tag, **row})
        for o in (v6, v6_lpm):
            o.close()

        enc = gw("bench_gateway", n_hosts=hosts)
        row = measure(raw_floor, reply_frame(hosts // 2), floor, enc, Reason.FWD_TO_COMPUTE,
                      repeat, rounds)
        out({"scenario": "return_encap_100k_hosts", "hosts": hosts, **tag, **row})
        enc.close()
        policy_scenarios(_loader(sfx, is_live, r4), tables, frames, hosts, repeat, rounds, out,
                         {**tag, "routes": len(r4.plen)})
        _clock_row(sfx, is_live, frames[0], repeat, rounds, out, mode)
        floor.close()
        raw_floor.close()
    _summary(results, live.unavailable(), emit, cond)
    return results


def _summary(results: list[dict], unavailable: str, emit: Callable[[str], object],
             cond: dict) -> None:
    """The last line: which modes ran, how many scenario lines each gave, and, where live
    frames were refused, the kernel's answer (the restore harness is then the only figure)."""
    measured: dict[str, int] = {}
    for r in results:
        if "mode" in r and "unavailable" not in r:
            measured[r["mode"]] = measured.get(r["mode"], 0) + 1
    summary: dict[str, object] = {
        "summary": True, "modes_measured": measured,
        "live_frames": "unavailable" if unavailable else "measured",
        # scenarios in which some iteration was not counted under its expected reason
        "unverified": [f"{r['scenario']}/{r['mode']}" for r in results
                       if r.get("every_iteration_verified") is False],
        **cond}
    if unavailable:
        summary["live_frames_unavailable"] = unavailable
    results.append(summary)
    emit(json.dumps(summary))
