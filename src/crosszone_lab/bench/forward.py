"""`crosszone bench forward`: MTU-size VXLAN through one gateway of each kind, same generator.

Path, rebuilt for every row so that rows share nothing:

    czbench-gen  g0 ==veth==  c0  czbench-gw  s0 ==veth==  r0  czbench-sink

(with CROSSZONE_EMULATE_INSTANCE=f: czbenchf-gen and so on, and the pins under czbenchf.)

- Generator: cz_sender (bench/sender/cz_sender.c, built by `make build`) in the generator's
  namespace puts the frame on g0 through an AF_XDP socket in copy mode, an ordinary sender
  that needs no BPF test run (docs/emulate.md: why this one). The process
  is pinned to one CPU; the veth hands frames on in softirq on that CPU, so the sender, the
  gateway and the sink all run on it, and its busy time per forwarded packet (/proc/stat, read
  by the sender around its measured phase) is the cost of one packet end to end;
  `gateway_ns_per_pkt` subtracts the generator row's cost (send + drop at c0). `--sender`
  picks cz_sender's other modes (AF_PACKET transmit ring, sendmmsg), or the former live-frames
  test run (bpf/bench_forward_gen.c) where the kernel allows it, for comparison.
- Gateway: legacy (VXLAN device + nftables translation + routing, as in the emulator), crosszone
  (`crosszone fastpath attach` with an intent for this path) or floor (strip 50 bytes, rewrite
  MACs, redirect through a devmap as the gateway does: nothing forwards for less on this path).
- Sink: an XDP program on r0 (bpf/bench_forward_sink.c) that validates and counts good,
  corrupted and misrouted frames; frames sent and not counted good are `lost`.
- Generator's own rate: the same generator into a c0 that runs XDP_DROP.
- Rounds: every row is measured once per round, rounds interleaved; each kind's line is its
  median round, and the summary's ratios are medians of per-round ratios (listed in `*_rounds`).

Legacy's c0 runs GRO (a NIC's default; it also gives the veth the NAPI context that an XDP_TX
into it needs), so the kernel path gets every help it would have on a real box.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import struct
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from crosszone.abi.objects import BUILD_DIR, object_path
from crosszone.linux.environment import EnvironmentProblem
from crosszone_lab.bench.forward_sender import (
    DEFAULT_SENDER,
    DESCRIPTION,
    SENDER,
    SENDERS,
    Sender,
    cpu_busy_ns,
    open_sender,
)
from crosszone_lab.emulate.crosszone_gateway import crosszone_bin
from crosszone_lab.emulate.topology import INSTANCE

# Named after the emulator instance (CROSSZONE_EMULATE_INSTANCE) like everything the emulator
# owns: `teardown` removes these names first, so a second instance's bench (or demo, part 3)
# must never share them with the default one's.
PIN = Path(f"/sys/fs/bpf/czbench{INSTANCE}")
#: The rows, in the order of each round: the generator's own cost first.
KINDS = ("generator", "floor", "crosszone", "legacy")
BUILD = BUILD_DIR
MAC = {"g0": "02:b0:00:00:00:01", "c0": "02:b0:00:00:00:02",
       "s0": "02:b0:00:00:01:02", "r0": "02:b0:00:00:01:01",
       "host": "02:b0:00:00:0a:01", "router": "02:b0:00:00:0a:fe"}
HOST_VTEP, ANYCAST, VNI = "10.1.1.2", "10.0.0.100", 1001
INNER_SRC, FACING_SRC, STORAGE_DST = "192.168.1.10", "100.64.1.10", "172.16.0.11"
UDP_DPORT = 9
FRAME_BYTES = 1514  # outer Ethernet frame (no FCS): outer IPv4 packet of 1500 bytes
# The sink's counters (bpf/bench_forward_sink.c): good, corrupted, misrouted, other.
COUNT_GOOD, COUNT_CORRUPTED, COUNT_MISROUTED, COUNT_OTHER = range(4)
PAYLOAD_MAGIC = 0xC2A5F00D  # payload word k is PAYLOAD_MAGIC ^ k, as the sink checks
# name in this module -> object built by `make build` from bpf/bench_forward_NAME.c
BENCH_PROGRAMS = {"gen": "bench_forward_gen", "sink": "bench_forward_sink",
                  "floor_fwd": "bench_forward_floor"}


@dataclass(frozen=True)
class Names:
    """One row's namespaces (generator, gateway, sink) and pin directory."""

    gen: str
    gw: str
    sink: str
    pin: Path


def names(kind: str) -> Names:
    """The names of `kind`'s path: every row has its own, so all paths stand at once."""
    base = f"czbench{INSTANCE}-{kind}"
    return Names(f"{base}-gen", f"{base}-gw", f"{base}-sink", PIN / kind)


def _ip(*argv: str, check: bool = True) -> None:
    res = subprocess.run(["ip", *argv], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {res.stderr.strip()}")


def _in(ns: str, *argv: str, stdin: str | None = None) -> None:
    res = subprocess.run(["ip", "netns", "exec", ns, *argv], input=stdin, capture_output=True,
                         text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{ns}: {' '.join(argv)}: {res.stderr.strip()}")


def _mac_bytes(mac: str) -> bytes:
    return bytes(int(x, 16) for x in mac.split(":"))


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def _ipv4(src: str, dst: str, proto: int, payload: bytes, ttl: int = 64) -> bytes:
    a, b = bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, ttl, proto, 0, a, b)
    return hdr[:10] + struct.pack("!H", _csum(hdr)) + hdr[12:] + payload


def _udp(src: str, dst: str, sport: int, dport: int, payload: bytes) -> bytes:
    a, b = bytes(map(int, src.split("."))), bytes(map(int, dst.split(".")))
    hdr = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
    pseudo = a + b + struct.pack("!BBH", 0, 17, 8 + len(payload))
    c = _csum(pseudo + hdr + payload) or 0xFFFF
    return hdr[:6] + struct.pack("!H", c) + payload


def bench_frame(frame_bytes: int = FRAME_BYTES) -> bytes:
    """The generator's frame: VXLAN from the host VTEP to the anycast VTEP, outer UDP checksum
    0 (RFC 7348, and what Linux VTEPs send), inner UDP with a full checksum and a pattern."""
    inner_ip_len = frame_bytes - 14 - 50
    n = inner_ip_len - 28
    words = b"".join(struct.pack("!I", PAYLOAD_MAGIC ^ k) for k in range(n // 4 + 1))
    inner = (_mac_bytes(MAC["router"]) + _mac_bytes(MAC["host"]) + b"\x08\x00"
             + _ipv4(INNER_SRC, STORAGE_DST, 17,
                     _udp(INNER_SRC, STORAGE_DST, 40000, UDP_DPORT, words[:n])))
    vxlan = struct.pack("!II", 0x08000000, VNI << 8) + inner
    outer_udp = struct.pack("!HHHH", 49152, 4789, 8 + len(vxlan), 0) + vxlan
    outer = _ipv4(HOST_VTEP, ANYCAST, 17, outer_udp, ttl=63)
    frame = _mac_bytes(MAC["c0"]) + _mac_bytes(MAC["g0"]) + b"\x08\x00" + outer
    assert len(frame) == frame_bytes
    return frame


def intent() -> dict[str, Any]:
    """The crosszone gateway's intent for the bench path."""
    return {
        "version": 1,
        "gateway": {"name": "bench", "vtep": ANYCAST, "interfaces": [
            {"name": "c0", "role": "compute", "mac": MAC["c0"], "next_hop_mac": MAC["g0"]},
            {"name": "s0", "role": "storage", "mac": MAC["s0"]}]},
        "vpcs": [{"name": "a", "vni": VNI, "prefixes": ["192.168.0.0/16"],
                  "storage_facing": ["100.64.0.0/16"], "router_mac": MAC["router"],
                  "storage_pools": ["pool"]}],
        "hosts": [{"name": "h1", "vpc": "a", "vtep": HOST_VTEP, "addresses": [INNER_SRC],
                   "mac": MAC["host"]}],
        "storage_pools": [{"name": "pool", "prefixes": ["172.16.0.0/24"],
                           "next_hops": [{"name": "r", "interface": "s0", "mac": MAC["r0"]}]}],
    }


LEGACY_NFT = """\
table ip czgw
delete table ip czgw
table ip czgw {
  counter dropped { }
  chain gw_prerouting {
    type filter hook prerouting priority raw; policy accept;
    iifname "vx-a" ip saddr 192.168.0.0/16 ip saddr set ip saddr & 0.0.255.255 | 100.64.0.0 notrack
  }
  chain gw_forward {
    type filter hook forward priority filter; policy accept;
    iifname . oifname vmap { "vx-a" . "s0" : accept, "s0" . "vx-a" : accept }
    counter name "dropped" drop
  }
}
"""


def _ifindex(ns: str, dev: str) -> int:
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", dev], capture_output=True,
                         text=True, check=True).stdout
    return int(json.loads(out)[0]["ifindex"])


def teardown() -> None:
    """Remove every row's namespaces and pins (idempotent)."""
    for kind in KINDS:
        n = names(kind)
        if n.pin.exists():
            subprocess.run([crosszone_bin(), "fastpath", "detach", "--pin-dir", str(n.pin)],
                           capture_output=True, check=False)
        for ns in (n.gen, n.gw, n.sink):
            _ip("netns", "del", ns, check=False)
    shutil.rmtree(PIN, ignore_errors=True)


@contextmanager
def bench_path(kind: str, objs: dict[str, Path]) -> Iterator[dict[str, Any]]:
    """Build the path of one row (its own namespaces); yields the sink's counter map and the
    generator's ifindex. Removes the path on exit."""
    from crosszone.fastpath.libbpf import BpfObject, xdp_attach
    from crosszone.linux.netns import in_netns

    n = names(kind)
    gen_ns, gw_ns, sink_ns = n.gen, n.gw, n.sink
    for ns in (gen_ns, gw_ns, sink_ns):
        _ip("netns", "add", ns)
        _in(ns, "ip", "link", "set", "lo", "up")
    held: list[Any] = []
    try:
        _ip("link", "add", "name", "g0", "netns", gen_ns, "address", MAC["g0"], "type", "veth",
            "peer", "name", "c0", "netns", gw_ns, "address", MAC["c0"])
        _ip("link", "add", "name", "s0", "netns", gw_ns, "address", MAC["s0"], "type", "veth",
            "peer", "name", "r0", "netns", sink_ns, "address", MAC["r0"])
        for ns, dev in ((gen_ns, "g0"), (gw_ns, "c0"), (gw_ns, "s0"), (sink_ns, "r0")):
            _in(ns, "ip", "link", "set", dev, "up")
        # Sink first: a redirect into s0 needs an XDP program on its peer r0.
        sink = BpfObject.open(objs["sink"])
        held.append(sink)
        expect_src = INNER_SRC if kind == "floor" else FACING_SRC
        sink.map("expect").update(struct.pack("<I", 0), _expect(expect_src))
        with in_netns(sink_ns):
            xdp_attach(_ifindex(sink_ns, "r0"), sink.program("cz_bench_sink").fd)
        if kind == "floor":
            fwd = BpfObject.open(objs["floor_fwd"])
            held.append(fwd)
            cfg = struct.pack("<I6s6s", _ifindex(gw_ns, "s0"), _mac_bytes(MAC["r0"]),
                              _mac_bytes(MAC["s0"]))
            fwd.map("fwd_cfg").update(struct.pack("<I", 0), cfg)
            with in_netns(gw_ns):  # a devmap resolves the ifindex in the writer's namespace
                fwd.map("fwd_port").update(struct.pack("<I", 0),
                                           struct.pack("<I", _ifindex(gw_ns, "s0")))
                xdp_attach(_ifindex(gw_ns, "c0"), fwd.program("cz_bench_fwd").fd)
        elif kind == "generator":
            drop = BpfObject.open(BUILD / "xdp_drop.o")
            held.append(drop)
            with in_netns(gw_ns):
                xdp_attach(_ifindex(gw_ns, "c0"), drop.program("cz_drop").fd)
        elif kind == "crosszone":
            d = Path(tempfile.mkdtemp(prefix="czbench-"))
            (d / "intent.yaml").write_text(yaml.safe_dump(intent(), sort_keys=False))
            PIN.mkdir(parents=True, exist_ok=True)
            res = subprocess.run([crosszone_bin(), "fastpath", "attach", "--netns", gw_ns,
                                  "--intent", str(d / "intent.yaml"), "--pin-dir",
                                  str(n.pin)], capture_output=True, text=True, check=False)
            shutil.rmtree(d, ignore_errors=True)
            if res.returncode != 0:
                raise RuntimeError(f"fastpath attach: {res.stderr.strip()[-400:]}")
        else:
            _legacy(gw_ns)
        yield {"counts": sink.map("counts"), "g0": _ifindex(gen_ns, "g0")}
    finally:
        for obj in held:
            obj.close()
        if kind == "crosszone":
            subprocess.run([crosszone_bin(), "fastpath", "detach", "--pin-dir", str(n.pin)],
                           capture_output=True, check=False)
        for ns in (gen_ns, gw_ns, sink_ns):
            _ip("netns", "del", ns, check=False)


def _expect(src: str) -> bytes:
    return struct.pack("<4s4s6sH", bytes(map(int, src.split("."))),
                       bytes(map(int, STORAGE_DST.split("."))), _mac_bytes(MAC["r0"]), UDP_DPORT)


def _legacy(gw_ns: str) -> None:
    """The kernel gateway of the emulator on this path (one VPC, one host, one next hop)."""
    for s in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
              "net.ipv4.conf.default.rp_filter=0"):
        _in(gw_ns, "sysctl", "-qw", s)
    _in(gw_ns, "ip", "addr", "add", f"{ANYCAST}/32", "dev", "lo")
    _in(gw_ns, "ip", "addr", "add", "10.10.1.2/24", "dev", "c0")
    _in(gw_ns, "ip", "addr", "add", "10.20.1.2/24", "dev", "s0")
    _in(gw_ns, "ip", "link", "add", "vx-a", "address", MAC["router"], "type", "vxlan", "id",
        str(VNI), "local", ANYCAST, "dstport", "4789", "nolearning")
    _in(gw_ns, "ip", "link", "set", "vx-a", "up")
    _in(gw_ns, "ip", "route", "add", HOST_VTEP, "via", "10.10.1.1", "dev", "c0")
    _in(gw_ns, "ip", "neigh", "replace", "10.10.1.1", "lladdr", MAC["g0"], "dev", "c0",
        "nud", "permanent")
    _in(gw_ns, "ip", "route", "add", "172.16.0.0/24", "via", "10.20.1.1", "dev", "s0")
    _in(gw_ns, "ip", "neigh", "replace", "10.20.1.1", "lladdr", MAC["r0"], "dev", "s0",
        "nud", "permanent")
    _in(gw_ns, "nft", "-f", "-", stdin=LEGACY_NFT)
    _in(gw_ns, "ethtool", "-K", "c0", "gro", "on")


def bench_objects(sender: str = DEFAULT_SENDER) -> dict[str, Path]:
    """The generator, sink and floor-forward objects that `make build` put in build/ (and the
    sender, checked here so that a missing build fails before any namespace exists)."""
    objs = {name: object_path(obj) for name, obj in BENCH_PROGRAMS.items()}
    missing = [str(p) for p in objs.values() if not p.exists()]
    if sender != "live_frames" and not SENDER.exists():
        missing.append(str(SENDER))
    if missing:
        raise EnvironmentProblem(f"the benchmark's programs {', '.join(missing)}",
                                 "missing (run `make build`)")
    return objs


def check_sender(sender: str) -> None:
    """Refuse an unknown sender, or live frames where the kernel refuses them (one probe)."""
    if sender not in SENDERS:
        raise ValueError(f"unknown sender {sender!r}: one of {', '.join(SENDERS)}")
    if sender == "live_frames":
        from crosszone.fastpath.live_frames import probe

        answer = probe()
        if not answer.allowed:
            raise EnvironmentProblem("live-frames test runs (--sender live_frames)",
                                     answer.unavailable())


def _sum_counts(counts: Any) -> list[int]:
    out = []
    for k in range(4):
        vals = counts.lookup_percpu(struct.pack("<I", k))
        out.append(sum(struct.unpack("<Q", v[:8])[0] for v in vals))
    return out


def measure_row(kind: str, counts: Any, sender: Sender, cpu: int,
                frame_bytes: int) -> dict[str, Any]:
    """One measured phase of one row: forwarded pps at the sink, busy ns of the pinned CPU
    per packet (the sender reads it around its phase)."""
    others = [c for c in range(os.cpu_count() or 1) if c != cpu]
    c0 = _sum_counts(counts)
    other0 = sum(cpu_busy_ns(c) for c in others)
    rep = sender.measure()
    other = sum(cpu_busy_ns(c) for c in others) - other0
    time.sleep(0.05)  # the last frames reach the sink
    c1 = _sum_counts(counts)
    sent, elapsed, busy = int(rep["sent"]), rep["ns"] / 1e9, int(rep["busy_ns"])
    good, corrupted, misrouted, _other = (b - a for a, b in zip(c0, c1, strict=True))
    delivered = good if kind != "generator" else sent
    pps = delivered / elapsed
    return {
        "gateway": kind,
        "packet_bytes": frame_bytes,
        "pps": round(pps),
        "gbps": round(pps * frame_bytes * 8 / 1e9, 3),
        "cpu_ns_per_pkt": round(busy / delivered, 1) if delivered else None,
        # The sender never sleeps and is pinned, so wall time per packet bounds the CPU time
        # per packet from above; the two agree when cpu_busy is near 1 (docs/emulate.md: with
        # live frames /proc/stat counted the CPU busy 26-80 % of the time, so only this held).
        "wall_ns_per_pkt": round(elapsed * 1e9 / delivered, 1) if delivered else None,
        "corrupted": corrupted,
        "misrouted": misrouted,
        # Frames the sender put on g0 that the sink did not count as good (a full veth ring,
        # a gateway that dropped them): none when the gateway keeps up with the sender.
        "lost": max(0, sent - good) if kind != "generator" else 0,
        "offered_pps": round(sent / elapsed),
        "cpu_busy": round(busy / (elapsed * 1e9), 3),
        # The other CPUs' busy share over the run: the bench's work stays on its CPU, so this
        # is the rest of the box (other tenants); it is not counted in cpu_ns_per_pkt.
        "other_cpus_busy": round(other / (elapsed * 1e9), 3),
        "seconds": round(elapsed, 2),
    }


def _gateway_cost(row: dict[str, Any], gen_ns: float | None, frame_bytes: int) -> None:
    """What the row costs beyond generating a frame and dropping it at c0: the gateway's own
    CPU per packet, and so what one core given only to the gateway forwards (the generator
    shares the measured CPU; a real gateway core does not)."""
    if gen_ns is None or row.get("cpu_ns_per_pkt") is None:
        return
    row["gateway_ns_per_pkt"] = round(row["cpu_ns_per_pkt"] - gen_ns, 1)
    if row["gateway_ns_per_pkt"] > 0:
        row["gateway_core_mpps"] = round(1e3 / row["gateway_ns_per_pkt"], 3)
        row["gateway_core_gbps"] = round(frame_bytes * 8 / row["gateway_ns_per_pkt"], 3)


def _rounds(kinds: tuple[str, ...], objs: dict[str, Path], sender: str, frame: bytes,
            seconds: float, cpu: int, rounds: int, per: dict[str, list[dict[str, Any]]]) -> None:
    """Build every path, start a warm sender on each, measure `rounds` rounds into `per`."""
    with ExitStack() as stack:
        paths = {k: stack.enter_context(bench_path(k, objs)) for k in kinds}
        senders = {k: stack.enter_context(open_sender(sender, names(k).gen, paths[k]["g0"],
                                                      frame, seconds, cpu, objs["gen"]))
                   for k in kinds}
        time.sleep(0.1)  # the warm-ups' frames reach the sinks before the first reading
        for _ in range(rounds):
            gen_ns = None
            for kind in kinds:
                row = measure_row(kind, paths[kind]["counts"], senders[kind], cpu, len(frame))
                if kind == "generator":
                    gen_ns = row["cpu_ns_per_pkt"]
                else:
                    _gateway_cost(row, gen_ns, len(frame))
                per[kind].append(row)


def run_bench(seconds: float = 1.0, cpu: int | None = None,
              emit: Callable[[dict[str, Any]], None] = lambda r: print(json.dumps(r)),
              kinds: tuple[str, ...] = KINDS, rounds: int = 5,
              sender: str = DEFAULT_SENDER) -> list[dict[str, Any]]:
    """Every row's path built at once, one warm sender on each, then rounds of `seconds` per
    row (generator, floor, crosszone, legacy, again...); one line per kind (its median round)
    and a summary with the ratios and the conditions.

    Rows measured minutes apart on a shared machine differ by tens of percent (the floor alone
    ran 186-268 ns per packet across runs here), so every kind is measured once per round, and
    each round's ratios compare rows taken a few seconds apart; the summary gives their
    medians. With all paths standing, a round costs only its measured seconds."""
    ncpu = os.cpu_count() or 1
    cpu = (ncpu - 1) if cpu is None else cpu
    check_sender(sender)
    objs = bench_objects(sender)
    os.sched_setaffinity(0, {cpu})  # before the senders start: they inherit it
    frame = bench_frame()
    per: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    teardown()
    try:
        _rounds(kinds, objs, sender, frame, seconds, cpu, rounds, per)
    finally:
        teardown()
    rows = []
    for kind in kinds:
        runs = per[kind]
        # the median round by CPU per packet; bad frames are counted over every round
        ranked = sorted(runs, key=lambda r: r["cpu_ns_per_pkt"] or 0.0)
        row = dict(ranked[len(ranked) // 2])
        row["corrupted"] = sum(r["corrupted"] for r in runs)
        row["misrouted"] = sum(r["misrouted"] for r in runs)
        row["lost"] = sum(r["lost"] for r in runs)
        row["rounds"] = len(runs)
        costs = [r["gateway_ns_per_pkt"] for r in runs if "gateway_ns_per_pkt" in r]
        if costs:
            # the gateway's cost is the median of its rounds' (each against its own round's
            # generator), not the median round's, which may be the one with a slow generator
            for key in ("gateway_ns_per_pkt", "gateway_core_mpps", "gateway_core_gbps"):
                row.pop(key, None)
            row["gateway_ns_per_pkt_rounds"] = costs
            _gateway_cost(row, row["cpu_ns_per_pkt"] - statistics.median(costs), len(frame))
        rows.append(row)
        emit(row)
    summary: dict[str, Any] = {
        "summary": True, "kernel": platform.release(), "cpu_model": _cpu_model(),
        "cpu": cpu, "cpus": ncpu, "load_avg_1m": os.getloadavg()[0], "rounds": rounds,
        "seconds_per_row": seconds, "sender": sender, "generator": DESCRIPTION[sender],
    }

    def ratio(name: str, a: str, b: str, field: str) -> None:
        if a not in per or b not in per:
            return
        each = [ra[field] / rb[field] for ra, rb in zip(per[a], per[b], strict=True)
                if ra.get(field) and rb.get(field)]
        if each:
            summary[name] = round(statistics.median(each), 3)
            summary[name + "_rounds"] = [round(x, 3) for x in each]

    ratio("crosszone_over_legacy", "crosszone", "legacy", "pps")
    ratio("crosszone_over_floor", "crosszone", "floor", "pps")
    ratio("crosszone_over_legacy_per_gateway_core", "crosszone", "legacy", "gateway_core_mpps")
    ratio("crosszone_over_floor_per_gateway_core", "crosszone", "floor", "gateway_core_mpps")
    ratio("generator_over_floor", "generator", "floor", "pps")
    emit(summary)
    return rows


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()
