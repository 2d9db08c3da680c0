"""Validation of the fluid model against a small emulated gateway tier (`czval-*` namespaces).

Why a tier of its own and not the emulated deployment (`crosszone_lab.emulate`): on a 2-core box the
full deployment is CPU-bound as a whole (hosts, routers, gateways and storage share two cores),
so its per-gateway capacity is whatever the CPU happens to push, not a parameter one can set.
The fluid model takes the per-device capacity as its input. Here every gateway's egress is
shaped (tbf) to a rate well below what the box forwards unshaped (the run measures that and
refuses to go on without the margin), which makes capacity a known parameter.

Topology (all in namespaces prefixed `czval-`; nothing else is touched)::

    czval-client (GPU hosts, 10.253.0.1) ==veth== czval-gw0 ==veth== czval-storage (10.254.0.1)
                                         ==veth== czval-gw1 ==veth==

Each gateway forwards (plain kernel routing) and shapes its egress toward the client with a
token bucket (`tbf`, 1 MiB FIFO behind it, like a NIC queue: no per-flow fair queueing; this
kernel has no fair-queueing qdisc at all). TCP congestion control is set per socket (default
bbr, the box's default; cubic for comparison: it shares a FIFO less evenly). Storage sends
the data (dataset reads: storage -> GPU hosts) over a multipath route with the L4 hash
(`fib_multipath_hash_policy=1`): the kernel places each TCP flow on a gateway by a hash of its
5-tuple, i.e. ECMP with real collisions. `ip route get ... ipproto tcp sport .. dport ..` asks the
kernel which gateway a 5-tuple hashes to; a mix that wants a given placement (a collision of
three elephants) picks client ports whose 5-tuples hash there, a `hashed` mix takes consecutive
ports and whatever the hash gives. After every run the gateways' byte counters are checked
against the predicted placement, so a wrong prediction is an error, not a silent mismatch.

Each flow is one TCP connection (plain Python sockets, one thread each): the client sends the
size it wants, storage sends that many bytes. The client measures connect-to-last-byte. All flows
of a batch start together (one barrier, like the simulation's synchronised phase), so the model's
solver for a phase, `fluid.processor_sharing_finish`, gets the same flows: sizes, gateway of each,
a common start and the gateway capacity. The capacity is the configured rate times a goodput
factor measured by ONE calibration flow alone on one gateway (headers, ACK clocking, handshake and
slow start: what TCP gets out of the shaped rate); nothing is fitted per mix.

Functions here return data; printing lives in commands.py.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crosszone.linux.netns import (
    CommandFailed,
    Executor,
    Op,
    delete_namespaces,
    in_netns,
    in_ns,
    named_netns,
    plan_namespaces,
)
from crosszone.plan.fluid import processor_sharing_finish

__all__ = [
    "MIXES",
    "FlowResult",
    "FlowSpec",
    "Mix",
    "MixResult",
    "ValidationError",
    "ValidationRun",
    "compare",
    "last_finishers",
    "run_validation",
]

PREFIX = "czval-"
_EX = Executor()
CLIENT_NS = "czval-client"
STORAGE_NS = "czval-storage"
GATEWAYS = 2
CLIENT_ADDR = "10.253.0.1"
STORAGE_ADDR = "10.254.0.1"
PORT = 5001
DEFAULT_RATE_MBIT = 200.0
TARGET = 0.15  # relative error on transfer times the model must stay within
SMALL_BYTES = 1 << 20  # flows below this are "small requests", reported apart
MIB = 1 << 20
_LOCK = "/run/lock/crosszone-simulate-validate.lock"
_TBF_BURST = 16 * 1024  # bytes: ~0.65 ms at 200 Mbit/s, >= 10 frames
_TBF_LIMIT = 1024 * 1024  # bytes of queue: ~42 ms at 200 Mbit/s
DEFAULT_CONGESTION = "bbr"  # this box's default; cubic is the other one compared in docs
_CALIBRATION_BYTES = 32 * MIB
_UNSHAPED_BYTES = 64 * MIB
_HEADROOM = 4.0  # the box must forward unshaped >= this x the tier's shaped aggregate
_TIMEOUT_S = 60.0
# Every run takes fresh client ports, so no 4-tuple is reused while in TIME_WAIT.
_FIRST_PORT = 20000


class ValidationError(RuntimeError):
    """The experiment cannot run (not root, box too loaded) or its placement check failed."""


def _gw_ns(i: int) -> str:
    return f"{PREFIX}gw{i}"


@dataclass(frozen=True)
class FlowSpec:
    """One TCP transfer: a name, its size, and the gateway it must hash to (None: any)."""

    name: str
    size_bytes: int
    gateway: int | None = None


@dataclass(frozen=True)
class Mix:
    """A batch of flows that start together."""

    name: str
    description: str
    flows: tuple[FlowSpec, ...]


def _mix(name: str, description: str, elephants: Sequence[tuple[int, int | None]]) -> Mix:
    """Elephants (MiB, gateway) plus four 64 KiB requests (two per gateway, or hashed)."""
    flows = [FlowSpec(f"e{i + 1}", mib * MIB, gw) for i, (mib, gw) in enumerate(elephants)]
    hashed = all(gw is None for _, gw in elephants)
    for j in range(4):
        flows.append(FlowSpec(f"s{j + 1}", 64 * 1024, None if hashed else j % GATEWAYS))
    return Mix(name, description, tuple(flows))


MIXES: tuple[Mix, ...] = (
    _mix(
        "balanced",
        "8 elephants of 8-32 MiB, 76 MiB per gateway",
        [(32, 0), (28, 1), (24, 1), (20, 0), (16, 0), (12, 1), (12, 1), (8, 0)],
    ),
    _mix(
        "collision",
        "3 x 32 MiB elephants hash onto gateway 0, 5 of 8-16 MiB onto gateway 1",
        [(32, 0), (32, 0), (32, 0), (16, 1), (12, 1), (8, 1), (8, 1), (8, 1)],
    ),
    _mix(
        "hashed",
        "8 elephants of 8-32 MiB on consecutive client ports: wherever the 5-tuple hash puts them",
        [(mib, None) for mib in (32, 24, 24, 16, 16, 12, 8, 8)],
    ),
)


@dataclass(frozen=True)
class FlowResult:
    """One flow: where it went, what the emulation measured and what the model says."""

    name: str
    size_bytes: int
    gateway: int
    port: int
    start_s: float  # measured start, from the batch's barrier
    measured_s: float  # measured transfer time (connect to last byte)
    model_s: float  # the fluid model's transfer time

    @property
    def rel_error(self) -> float:
        return (self.measured_s - self.model_s) / self.model_s

    @property
    def small(self) -> bool:
        return self.size_bytes < SMALL_BYTES


@dataclass(frozen=True)
class MixResult:
    """A mix's flows and the errors of the model against the emulation."""

    mix: str
    description: str
    gateways: int
    gbps_per_gateway: float  # the model's capacity: configured rate x goodput factor
    flows: tuple[FlowResult, ...]
    measured_batch_s: float  # barrier to the last byte of the last flow
    model_batch_s: float
    counter_bytes: tuple[int, ...]  # bytes each gateway's shaper sent during the run

    @property
    def elephants(self) -> tuple[FlowResult, ...]:
        return tuple(f for f in self.flows if not f.small)

    @property
    def small_flows(self) -> tuple[FlowResult, ...]:
        return tuple(f for f in self.flows if f.small)

    @staticmethod
    def _errors(flows: Sequence[FlowResult]) -> tuple[float, float]:
        errs = [abs(f.rel_error) for f in flows]
        return (float(np.mean(errs)), float(np.max(errs))) if errs else (0.0, 0.0)

    @property
    def mean_rel_error(self) -> float:
        """Mean |relative error| of the transfer times of the bulk (>= 1 MiB) flows."""
        return self._errors(self.elephants)[0]

    @property
    def max_rel_error(self) -> float:
        return self._errors(self.elephants)[1]

    @property
    def batch_rel_error(self) -> float:
        return (self.measured_batch_s - self.model_batch_s) / self.model_batch_s

    @property
    def last_agree(self) -> bool:
        """Do model and emulation name the same flows as the last to finish?"""
        k = len(last_finishers({f.name: f.model_s for f in self.flows}))
        model = set(last_finishers({f.name: f.model_s for f in self.flows}))
        measured = sorted(self.flows, key=lambda f: f.start_s + f.measured_s)[-k:]
        return model == {f.name for f in measured}

    @property
    def within_target(self) -> bool:
        """Mean per-flow error (bulk flows) and the batch's error both within TARGET.

        The max per-flow error is reported next to it, not part of it: over a FIFO, TCP's
        short-term unfairness alone puts single mid-size flows 20-40 % off in some runs.
        """
        return self.mean_rel_error <= TARGET and abs(self.batch_rel_error) <= TARGET

    def to_json(self) -> dict[str, Any]:
        small_mean, small_max = self._errors(self.small_flows)
        placement = [sum(1 for f in self.elephants if f.gateway == g) for g in range(self.gateways)]
        return {
            "mix": self.mix,
            "flows": len(self.flows),
            "gateways": self.gateways,
            "gbps_per_gateway": round(self.gbps_per_gateway, 4),
            "elephants_per_gateway": placement,
            "mean_rel_error": round(self.mean_rel_error, 4),
            "max_rel_error": round(self.max_rel_error, 4),
            "batch_s": round(self.measured_batch_s, 3),
            "model_batch_s": round(self.model_batch_s, 3),
            "batch_rel_error": round(self.batch_rel_error, 4),
            "small_mean_rel_error": round(small_mean, 4),
            "small_max_rel_error": round(small_max, 4),
            "last_finishers_agree": self.last_agree,
            "within_15pct": self.within_target,
        }


@dataclass(frozen=True)
class ValidationRun:
    """A whole experiment: the calibration, the headroom check and every mix."""

    rate_mbit: float
    congestion: str
    goodput_factor: float
    unshaped_gbps: float
    mixes: tuple[MixResult, ...] = field(default_factory=tuple)

    @property
    def capacity_gbps(self) -> float:
        return self.rate_mbit * 1e-3 * self.goodput_factor


def last_finishers(times: dict[str, float], gap: float = 0.15) -> list[str]:
    """The flows that finish last, down to the first gap of `gap` (relative) in finish times.

    For the collision mix that is the three colliding elephants; flows whose finish times are
    closer than the gap are one group (their order within it is a coin toss in any emulation).
    """
    ordered = sorted(times, key=lambda n: times[n], reverse=True)
    group = ordered[:1]
    for prev, name in itertools.pairwise(ordered):
        if times[name] < times[prev] * (1 - gap):
            break
        group.append(name)
    return group


def compare(
    flows: Sequence[tuple[FlowSpec, int, int, float, float]],
    capacity_gbps: float,
    gateways: int = GATEWAYS,
) -> tuple[FlowResult, ...]:
    """Model every flow (spec, gateway, port, start, measured) and pair it with its measurement.

    The model is the fluid simulation's phase solver: max-min fair (processor sharing) per
    gateway, all flows starting together, no per-flow cap below the gateway's capacity.
    """
    device = np.array([gw for _, gw, _, _, _ in flows], dtype=np.int64)
    bits = np.array([spec.size_bytes * 8.0 for spec, _, _, _, _ in flows])
    capacity = capacity_gbps * 1e9
    finish, _, _, _ = processor_sharing_finish(device, bits, capacity, capacity, gateways)
    return tuple(
        FlowResult(spec.name, spec.size_bytes, gw, port, start, measured, float(model))
        for (spec, gw, port, start, measured), model in zip(flows, finish)
    )


# --- the emulated tier ------------------------------------------------------------------------


def _run(*args: str) -> str:
    try:
        return _EX.output(args)
    except CommandFailed as exc:
        raise ValidationError(str(exc)) from None


def _apply(ops: Sequence[Op]) -> None:
    try:
        _EX.apply(ops)
    except CommandFailed as exc:
        raise ValidationError(str(exc)) from None


def _ours() -> list[str]:
    return [n for n in named_netns() if n.startswith(PREFIX)]


def _teardown() -> None:
    _EX.apply(delete_namespaces(_ours()))


def _sysctl(ns: str, *settings: str) -> None:
    _run(*in_ns(ns, "sysctl", "-q", "-w", *settings).argv)


def _build(gateways: int) -> None:
    """Create the namespaces, links, addresses and routes (no shaping yet)."""
    names = [CLIENT_NS, STORAGE_NS, *(_gw_ns(i) for i in range(gateways))]
    _apply(plan_namespaces(names))
    for ns in names:
        _sysctl(ns, "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0")
    for i in range(gateways):
        gw = _gw_ns(i)
        for side, ns in (("c", CLIENT_NS), ("s", STORAGE_NS)):
            _run(
                *f"ip link add czv-{side}{i} netns {ns} type veth "
                f"peer name czv-g{side}{i} netns {gw}".split()
            )
        for ns, dev, addr in (
            (CLIENT_NS, f"czv-c{i}", f"10.251.{i}.1/24"),
            (gw, f"czv-gc{i}", f"10.251.{i}.2/24"),
            (gw, f"czv-gs{i}", f"10.252.{i}.1/24"),
            (STORAGE_NS, f"czv-s{i}", f"10.252.{i}.2/24"),
        ):
            _run("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _run("ip", "-n", ns, "link", "set", dev, "up")
        _sysctl(gw, "net.ipv4.ip_forward=1")
        _run("ip", "-n", gw, "route", "add", f"{CLIENT_ADDR}/32", "via", f"10.251.{i}.1")
        _run("ip", "-n", gw, "route", "add", f"{STORAGE_ADDR}/32", "via", f"10.252.{i}.2")
    _run("ip", "-n", CLIENT_NS, "addr", "add", f"{CLIENT_ADDR}/32", "dev", "lo")
    _run("ip", "-n", STORAGE_NS, "addr", "add", f"{STORAGE_ADDR}/32", "dev", "lo")
    for ns, dst, side, peer in (
        (CLIENT_NS, STORAGE_ADDR, "c", "2"),
        (STORAGE_NS, CLIENT_ADDR, "s", "1"),
    ):
        _sysctl(ns, "net.ipv4.fib_multipath_hash_policy=1")
        hops: list[str] = []
        for i in range(gateways):
            net = "251" if side == "c" else "252"
            hops += ["nexthop", "via", f"10.{net}.{i}.{peer}", "dev", f"czv-{side}{i}"]
        _run("ip", "-n", ns, "route", "add", f"{dst}/32", *hops)


def _shape(gateways: int, rate_mbit: float) -> None:
    for i in range(gateways):
        _run(
            *f"tc -n {_gw_ns(i)} qdisc replace dev czv-gc{i} root tbf rate {rate_mbit}mbit "
            f"burst {_TBF_BURST} limit {_TBF_LIMIT}".split()
        )


def _sent_bytes(gateways: int) -> tuple[int, ...]:
    """Bytes each gateway sent toward the client (interface counter: shaped or not)."""
    out = []
    for i in range(gateways):
        stats = json.loads(_run("ip", "-n", _gw_ns(i), "-j", "-s", "link", "show", f"czv-gc{i}"))
        out.append(int(stats[0]["stats64"]["tx"]["bytes"]))
    return tuple(out)


def gateway_of(port: int) -> int:
    """The gateway the kernel's ECMP hash puts storage's data for client `port` on."""
    route = json.loads(
        _run(
            *(
                f"ip -n {STORAGE_NS} -j route get {CLIENT_ADDR} from {STORAGE_ADDR} "
                f"ipproto tcp sport {PORT} dport {port}"
            ).split()
        )
    )
    dev = route[0]["dev"]
    return int(dev.removeprefix("czv-s"))


class _Storage:
    """The storage side: accepts connections, sends each the size it asks for."""

    def __init__(self, max_bytes: int, congestion: str) -> None:
        self.congestion = congestion.encode()
        self.payload = memoryview(bytes(max_bytes))
        self.stop = threading.Event()
        with in_netns(STORAGE_NS):
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.congestion)
        self.sock.bind((STORAGE_ADDR, PORT))
        self.sock.listen(128)
        self.sock.settimeout(0.2)
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._accept, name="czval-storage", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(_TIMEOUT_S)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, self.congestion)
            head = b""
            while len(head) < 8:
                chunk = conn.recv(8 - len(head))
                if not chunk:
                    return
                head += chunk
            (size,) = struct.unpack("!Q", head)
            conn.sendall(self.payload[:size])
            conn.shutdown(socket.SHUT_WR)
            while conn.recv(4096):  # until the client closes
                pass
        except OSError as exc:
            self.errors.append(exc)
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def _transfer(jobs: Sequence[tuple[int, int]], congestion: str) -> list[tuple[float, float]]:
    """Run (client port, bytes) transfers concurrently; (start from barrier, transfer time) each."""
    socks = []
    with in_netns(CLIENT_NS):
        for _ in jobs:
            socks.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    for sock, (port, _) in zip(socks, jobs):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, congestion.encode())
        sock.bind((CLIENT_ADDR, port))
        sock.settimeout(_TIMEOUT_S)
    barrier = threading.Barrier(len(jobs) + 1)
    results: list[tuple[float, float] | BaseException | None] = [None] * len(jobs)
    base = [0.0]

    def flow(i: int, sock: socket.socket, size: int) -> None:
        buf = bytearray(1 << 20)
        try:
            barrier.wait()
            t0 = time.perf_counter()
            sock.connect((STORAGE_ADDR, PORT))
            sock.sendall(struct.pack("!Q", size))
            got = 0
            while got < size:
                n = sock.recv_into(buf)
                if n == 0:
                    raise ValidationError(f"flow {i}: connection closed after {got} of {size} B")
                got += n
            t1 = time.perf_counter()
            results[i] = (t0, t1 - t0)
        except BaseException as exc:  # reported by the caller
            results[i] = exc
        finally:
            sock.close()

    threads = [
        threading.Thread(target=flow, args=(i, s, size), daemon=True)
        for i, (s, (_, size)) in enumerate(zip(socks, jobs))
    ]
    for t in threads:
        t.start()
    barrier.wait()
    base[0] = time.perf_counter()
    for t in threads:
        t.join(timeout=_TIMEOUT_S * 2)
    out: list[tuple[float, float]] = []
    for i, r in enumerate(results):
        if r is None:
            raise ValidationError(f"flow {i} did not finish")
        if isinstance(r, BaseException):
            raise ValidationError(f"flow {i} failed: {r}") from r
        out.append((r[0] - base[0], r[1]))
    return out


class _Ports:
    """Fresh client ports, chosen so that their 5-tuples hash onto the wanted gateway."""

    def __init__(self, first: int = _FIRST_PORT) -> None:
        self.next = first
        self.spare: dict[int, list[int]] = {}

    def take(self, gateway: int | None) -> tuple[int, int]:
        """(port, gateway it hashes to)."""
        if gateway is not None and self.spare.get(gateway):
            return self.spare[gateway].pop(0), gateway
        while True:
            port = self.next
            self.next += 1
            got = gateway_of(port)
            if gateway is None or got == gateway:
                return port, got
            self.spare.setdefault(got, []).append(port)


@contextlib.contextmanager
def _tier(gateways: int) -> Iterator[None]:
    """The czval- namespaces, built now and always removed, even after a failure."""
    if os.geteuid() != 0:
        raise ValidationError("needs root (network namespaces, tc)")
    os.makedirs(os.path.dirname(_LOCK), exist_ok=True)
    with open(_LOCK, "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValidationError("another simulate-validate run holds " + _LOCK) from None
        _teardown()  # leftovers of an earlier run of ours (czval- only)
        try:
            _build(gateways)
            yield
        finally:
            _teardown()


def _run_mix(mix: Mix, ports: _Ports, storage: _Storage, capacity_gbps: float) -> MixResult:
    congestion = storage.congestion.decode()
    placed = [ports.take(spec.gateway) for spec in mix.flows]
    before = _sent_bytes(GATEWAYS)
    measured = _transfer(
        [(port, spec.size_bytes) for spec, (port, _) in zip(mix.flows, placed)], congestion
    )
    after = _sent_bytes(GATEWAYS)
    counters = tuple(a - b for a, b in zip(after, before))
    # The placement check: each gateway carried (within headers) the bytes predicted for it.
    total = sum(spec.size_bytes for spec in mix.flows)
    for g in range(GATEWAYS):
        predicted = sum(spec.size_bytes for spec, (_, gw) in zip(mix.flows, placed) if gw == g)
        if abs(counters[g] - predicted * 1.05) > 0.05 * total:
            raise ValidationError(
                f"{mix.name}: gateway {g} sent {counters[g]} B, the hash prediction says "
                f"~{predicted} B of payload: placement prediction is wrong"
            )
    rows = [
        (spec, gw, port, start, took)
        for spec, (port, gw), (start, took) in zip(mix.flows, placed, measured)
    ]
    flows = compare(rows, capacity_gbps)
    return MixResult(
        mix=mix.name,
        description=mix.description,
        gateways=GATEWAYS,
        gbps_per_gateway=capacity_gbps,
        flows=flows,
        measured_batch_s=max(f.start_s + f.measured_s for f in flows),
        model_batch_s=max(f.model_s for f in flows),
        counter_bytes=counters,
    )


def run_validation(
    mixes: Sequence[Mix] = MIXES,
    rate_mbit: float = DEFAULT_RATE_MBIT,
    congestion: str = DEFAULT_CONGESTION,
) -> ValidationRun:
    """Build the tier, check headroom, calibrate with one flow, run every mix, tear down."""
    biggest = max([_UNSHAPED_BYTES] + [f.size_bytes for m in mixes for f in m.flows])
    with _tier(GATEWAYS):
        storage = _Storage(biggest, congestion)
        try:
            ports = _Ports()
            # Headroom: one unshaped flow per gateway at once, before any shaping.
            pair = [ports.take(g) for g in range(GATEWAYS)]
            unshaped = _transfer([(port, _UNSHAPED_BYTES) for port, _ in pair], congestion)
            unshaped_gbps = GATEWAYS * _UNSHAPED_BYTES * 8 / max(t for _, t in unshaped) / 1e9
            if unshaped_gbps < _HEADROOM * GATEWAYS * rate_mbit * 1e-3:
                raise ValidationError(
                    f"the box forwards only {unshaped_gbps:.2f} Gbps unshaped through the tier, "
                    f"less than {_HEADROOM:g} x the shaped {GATEWAYS} x {rate_mbit:g} Mbit/s: "
                    "capacity would not be the shaper's"
                )
            _shape(GATEWAYS, rate_mbit)
            # Calibration: ONE flow alone on gateway 0.
            port, _ = ports.take(0)
            ((_, took),) = _transfer([(port, _CALIBRATION_BYTES)], congestion)
            factor = _CALIBRATION_BYTES * 8 / took / (rate_mbit * 1e6)
            capacity_gbps = rate_mbit * 1e-3 * factor
            results = tuple(_run_mix(m, ports, storage, capacity_gbps) for m in mixes)
            if storage.errors:
                raise ValidationError(f"storage side failed: {storage.errors[0]}")
        finally:
            storage.close()
    return ValidationRun(rate_mbit, congestion, factor, unshaped_gbps, results)
