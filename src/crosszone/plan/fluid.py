"""Fluid (flow-level, max-min fair) simulation of training traffic through a gateway tier.

Model
-----
- Every training step starts with a barrier: all servers read their dataset shard at once, as
  `streams` parallel streams (the step cannot start before the slowest server has its data). Every
  `every_steps` steps all servers write a checkpoint the same way and training stalls until the
  last write completes. A steady stream of small requests flows all the time.
- Each stream is placed on one gateway device by ECMP hashing. Each step reads from other storage
  targets, so its 5-tuples (and thus devices) are fresh random draws: elephant collisions on one
  device show up as stragglers, exactly as with a real hash.
- Flowlet switching (optional) re-hashes a stream at each idle gap: in the fluid limit a stream is
  cut into `m` flowlets of `flowlet_bytes` that travel concurrently over `m` hashed devices, each at
  up to 1/m of the stream's rate. m is capped at 16 (the per-device load variance falls as 1/m, so
  more pieces change little and only cost time).
- A server splits its shard evenly over its streams (a static split: each stream reads its own
  pieces), and shard sizes vary between servers (`size_cv`, lognormal).
- A device shares its capacity max-min fairly among the streams on it. Each stream is capped at
  its share of the server NIC (nic / streams): a stream that is not held back by the gateway runs
  at line rate / streams. This is where the model simplifies max-min: the NIC share a stream
  leaves unused (because a hot device holds it back) is not handed to its siblings. The siblings
  then finish a little later than under full max-min, but the server still waits for the held-back
  stream, so the step barrier (what training time depends on) hardly moves; tests compare it with
  an exact max-min solver. With equal caps on a device, the
  max-min allocation is processor sharing: all active streams get min(cap, C / active). Devices are
  then independent, and the completion times of a whole phase follow in closed form (sort each
  device's streams by size; stream i finishes after the i-th size increment at the rate for the
  n - i streams still active). A phase of 80,000 streams costs one sort, no event loop, which is
  what makes 10,000 servers over an hour fit in seconds.
- Small requests hash uniformly over devices. Their delay is the device's base latency plus
  queueing: when elephants saturate a device, TCP keeps its buffer full and a small request waits
  for the whole buffer to drain (buffer / C); below saturation an M/M/1 estimate on the elephants'
  utilisation; with `priority` (the traffic policy) it waits for at most one frame in service.

Everything here is pure: a Scenario and a seed in, results out. I/O lives in commands.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from crosszone.plan.scenario import Scenario, Tier

__all__ = [
    "PhaseStats",
    "SimulationResult",
    "TierResult",
    "processor_sharing_finish",
    "simulate",
    "simulate_tier",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_MAX_FLOWLETS = 16
_FRAME_BITS = 1514 * 8  # an elephant's full-size frame: what a small request waits for in service
# Histogram of small-request delays: log-spaced from 100 ns to 100 s, fine enough for a p99.
_DELAY_LOG_MIN, _DELAY_LOG_MAX, _DELAY_BINS_PER_DECADE = -7, 2, 80
_DELAY_EDGES_S = np.logspace(
    _DELAY_LOG_MIN,
    _DELAY_LOG_MAX,
    (_DELAY_LOG_MAX - _DELAY_LOG_MIN) * _DELAY_BINS_PER_DECADE + 1,
)


@dataclass(frozen=True)
class _Solved:
    """The processor-sharing solution of one phase; arrays are views into a `_Workspace`.

    They stay valid until the workspace solves its next phase.
    """

    finish: FloatArray  # finish time per stream, in the caller's order
    counts: IntArray  # streams per device
    active: npt.NDArray[np.intp]  # streams still active during each interval (sorted order)
    dt: FloatArray  # duration of each interval (sorted order)
    dev: npt.NDArray[np.intp]  # device of each interval (sorted order)
    rate_bps: FloatArray  # rate per stream by number of active streams (index 0 unused)


class _Workspace:
    """Scratch arrays for phases of `n` streams over `n_devices` devices, reused across phases.

    Allocating a dozen fresh n-sized temporaries per phase made glibc hand memory back to the
    kernel and fault it in again every phase (~1,400 page faults per 80,000-stream phase: about
    half of the solver's CPU time); with the buffers kept, every step is an in-place ufunc.
    """

    def __init__(self, n: int, n_devices: int) -> None:
        self.n, self.n_devices = n, n_devices
        self.index_bits = max(1, (n - 1).bit_length())
        key_bits = self.index_bits + max(1, (n_devices - 1).bit_length())
        self.key_type: type[np.unsignedinteger[Any]] | None
        if key_bits <= 32:
            self.key_type = np.uint32
        elif key_bits <= 64:
            self.key_type = np.uint64
        else:  # pragma: no cover - beyond any cluster this models
            self.key_type = None
        if self.key_type is not None:
            self.key = np.empty(n, dtype=self.key_type)
            self.index = np.arange(n, dtype=self.key_type)
        self.positions = np.arange(n, dtype=np.intp)
        self.order = np.empty(n, dtype=np.intp)
        self.dev = np.empty(n, dtype=np.intp)
        self.active = np.empty(n, dtype=np.intp)
        self.scratch_int = np.empty(n, dtype=np.intp)
        self.size = np.empty(n)
        self.inc = np.empty(n)
        self.dt = np.empty(n)
        self.cum = np.empty(n)
        self.scratch = np.empty(n)
        self.finish = np.empty(n)

    def _device_order(self, device: npt.NDArray[np.integer[Any]]) -> None:
        """Fill `order` with the stable order by device (ties keep index order) and `dev`.

        The device goes in the high bits and the index in the low bits of one integer key, so
        the keys are unique and one plain (unstable, SIMD) sort of them is the stable sort by
        device: about 3x cheaper than numpy's stable argsort (a radix sort plus a gather).
        """
        if self.key_type is None:  # pragma: no cover - beyond any cluster this models
            self.order[:] = np.argsort(device, kind="stable")
            np.take(device, self.order, out=self.dev, mode="wrap")
            return
        key, kt = self.key, self.key_type
        # Device numbers are in [0, n_devices), so the cast (from int64, too) is exact.
        np.left_shift(device, kt(self.index_bits), out=key, dtype=kt, casting="unsafe")
        np.bitwise_or(key, self.index, out=key)
        key.sort()
        # Written straight into intp arrays: numpy gathers with native indices ~1.5x faster.
        np.bitwise_and(key, kt((1 << self.index_bits) - 1), out=self.order)
        np.right_shift(key, kt(self.index_bits), out=self.dev)

    def solve(
        self,
        device: npt.NDArray[np.integer[Any]],
        bits: FloatArray,
        cap_bps: float,
        capacity_bps: float,
        group: int = 1,
    ) -> _Solved:
        """Processor sharing per device; stream i moves bits[i // group], non-decreasing in i.

        `group` > 1 (a server's streams share one size) lets the solver gather sizes from the
        short per-server array, which stays in cache, instead of a per-stream copy.
        """
        n = self.n
        self._device_order(device)
        order, dev, active = self.order, self.dev, self.active
        counts = np.bincount(device, minlength=self.n_devices)
        ends = np.cumsum(counts)
        starts = ends - counts
        # The stream at sorted position p is the (p - start)-th to finish on its device, so
        # while it runs, ends[dev] - p streams are active there.
        np.take(ends, dev, out=active, mode="wrap")
        np.subtract(active, self.positions, out=active)
        size = self.size
        if group == 1:
            np.take(bits, order, out=size, mode="wrap")
        else:
            np.floor_divide(order, group, out=self.scratch_int)
            np.take(bits, self.scratch_int, out=size, mode="wrap")
        # Bits each stream moves in its interval: the step from the previous size on its device.
        inc = self.inc
        inc[0] = size[0]
        np.subtract(size[1:], size[:-1], out=inc[1:])
        first = starts[counts > 0]
        inc[first] = size[first]
        # Rate per stream by the number of active streams, min(cap, C / k): a lookup table (k is
        # at most the worst collision) instead of a division per stream.
        k = np.arange(int(counts.max()) + 1, dtype=np.float64)
        with np.errstate(divide="ignore"):
            rate_bps = np.minimum(cap_bps, capacity_bps / k)
        dt, scratch = self.dt, self.scratch
        np.take(rate_bps, active, out=scratch, mode="wrap")
        np.divide(inc, scratch, out=dt)
        cum = np.cumsum(dt, out=self.cum)
        # Empty devices (count 0) are never gathered; clamp their start so the gather stays in
        # range.
        first_all = np.minimum(starts, n - 1)
        offset = cum[first_all] - dt[first_all]
        np.take(offset, dev, out=scratch, mode="wrap")
        np.subtract(cum, scratch, out=scratch)  # finish times in sorted order
        self.finish[order] = scratch
        return _Solved(self.finish, counts, active, dt, dev, rate_bps)


def _row_max(values: FloatArray, rows: int) -> FloatArray:
    """Maximum of each of `rows` equal consecutive runs of `values` (a server's streams)."""
    table = values.reshape(rows, -1)
    if table.shape[1] > 16:
        return table.max(axis=1)
    # Narrow rows: a maximum per column is ~4x faster than numpy's reduction along a short axis.
    out = table[:, 0].copy()
    for column in range(1, table.shape[1]):
        np.maximum(out, table[:, column], out=out)
    return out


def processor_sharing_finish(
    device: npt.NDArray[np.integer[Any]],
    bits: FloatArray,
    cap_bps: float,
    capacity_bps: float,
    n_devices: int,
    sizes_sorted: bool = False,
) -> tuple[FloatArray, IntArray, FloatArray, FloatArray]:
    """Finish times of streams that start together, max-min fair per device with one rate cap.

    Returns (finish time per stream, device per interval, interval duration, interval
    utilisation); the intervals are the piecewise-constant periods of each device, in order.
    `sizes_sorted` says `bits` is already non-decreasing, which saves a sort.
    """
    n = bits.shape[0]
    if n == 0:
        empty = np.zeros(0)
        return empty, np.zeros(0, dtype=np.int64), empty, empty
    if sizes_sorted:
        by_size = None
    else:
        by_size = np.argsort(bits, kind="stable")
        device, bits = device[by_size], bits[by_size]
    solved = _Workspace(n, n_devices).solve(device, bits, cap_bps, capacity_bps)
    finish = solved.finish
    if by_size is not None:
        unsorted = np.empty(n)
        unsorted[by_size] = finish
        finish = unsorted
    utilisation = np.minimum(1.0, solved.active * cap_bps / capacity_bps)
    return finish, solved.dev.astype(np.int64), solved.dt, utilisation


@dataclass(frozen=True)
class PhaseStats:
    """One synchronised transfer phase (a dataset load or a checkpoint) on one tier."""

    barrier_s: float  # until the slowest server finishes: what the step waits for
    unconstrained_s: float  # the same if the gateway were infinitely fast (largest shard / NIC)
    server_mean_s: float  # mean of the servers' own finish times
    max_per_device: int  # most streams (flowlets) on one device: the worst collision
    streams: int
    pieces: int


@dataclass
class _DelayHistogram:
    """Small-request delays, weighted by time (requests arrive evenly over time and devices)."""

    weights: FloatArray = field(default_factory=lambda: np.zeros(_DELAY_EDGES_S.size - 1))
    weighted_sum: float = 0.0
    total_weight: float = 0.0

    def add(self, delay_s: FloatArray, weight: FloatArray) -> None:
        # Log-spaced bins: the bin index is arithmetic on log10 (faster than a search).
        pos = (np.log10(np.maximum(delay_s, 1e-12)) - _DELAY_LOG_MIN) * _DELAY_BINS_PER_DECADE
        idx = np.clip(pos.astype(np.int64), 0, self.weights.size - 1)
        self.weights += np.bincount(idx, weights=weight, minlength=self.weights.size)
        # Not np.dot: that is BLAS, whose threads spin on other cores (twice the CPU time).
        self.weighted_sum += float(np.sum(delay_s * weight))
        self.total_weight += float(weight.sum())

    def add_constant(self, delay_s: float, weight: float) -> None:
        # The same binning as add(), in plain Python: this runs twice per step.
        pos = (math.log10(max(delay_s, 1e-12)) - _DELAY_LOG_MIN) * _DELAY_BINS_PER_DECADE
        self.weights[min(max(int(pos), 0), self.weights.size - 1)] += weight
        self.weighted_sum += delay_s * weight
        self.total_weight += weight

    def mean(self) -> float:
        return self.weighted_sum / self.total_weight if self.total_weight else 0.0

    def quantile(self, q: float) -> float:
        if not self.total_weight:
            return 0.0
        cdf = np.cumsum(self.weights) / self.weights.sum()
        i = int(np.searchsorted(cdf, q))
        i = min(i, self.weights.size - 1)
        # The bin's upper edge: a quantile is never understated (bins are 3 % wide).
        return float(_DELAY_EDGES_S[i + 1])


class _TierModel:
    """Per-tier constants and the phase solver, drawing from one random generator."""

    def __init__(self, scenario: Scenario, tier: Tier, rng: np.random.Generator) -> None:
        self.s = scenario
        self.tier = tier
        self.rng = rng
        self.devices = tier.devices
        capacity = tier.gbps_per_device * 1e9
        small = scenario.small_requests
        small_bps = scenario.cluster.servers * small.rate_per_server * small.bytes * 8
        self.small_util = small_bps / (capacity * tier.devices)
        # Small requests take their share first; elephants get what is left (at least 1 %, so an
        # overloaded tier still makes progress and shows up as very slow rather than as a crash).
        left = max(capacity * 0.01, capacity - small_bps / tier.devices)
        self.capacity_bps = left
        self.line_bps = capacity
        self.base_s = tier.latency_us * 1e-6 + small.bytes * 8 / capacity
        self.frame_s = _FRAME_BITS / capacity
        self.buffer_s = tier.buffer * 8 / capacity
        self.priority = scenario.small_priority
        self.delays = _DelayHistogram()
        self.idle_delay_s = float(self.small_delay(np.zeros(1))[0])
        self.workspaces: dict[int, _Workspace] = {}  # by number of streams (pieces) per phase

    def small_delay(self, utilisation: FloatArray) -> FloatArray:
        """Delay of a small request at devices with elephant utilisation `utilisation`."""
        if self.priority:
            return np.full(utilisation.shape, self.base_s + self.frame_s)
        rho = np.minimum(utilisation + self.small_util, 1.0)
        saturated = rho >= 1.0 - 1e-9
        with np.errstate(divide="ignore", invalid="ignore"):
            mm1 = np.where(saturated, np.inf, rho / (1.0 - rho) * self.frame_s)
        return self.base_s + np.where(saturated, self.buffer_s, np.minimum(mm1, self.buffer_s))

    def idle(self, seconds: float) -> None:
        """Account a period with no elephant traffic on any device."""
        self.idle_device_seconds(seconds * self.devices)

    def idle_device_seconds(self, device_seconds: float) -> None:
        """Account `device_seconds` of device time without elephants."""
        if device_seconds > 0:
            self.delays.add_constant(self.idle_delay_s, device_seconds)

    def phase(self, bytes_per_server: float, streams: int, size_cv: float) -> PhaseStats:
        """Run one synchronised phase: every server moves `bytes_per_server` in `streams`
        streams."""
        servers = self.s.cluster.servers
        n = servers * streams
        mean_bits = bytes_per_server * 8 / streams
        if size_cv > 0:
            # Shards differ between servers; within a server the streams split the shard evenly.
            sigma2 = math.log1p(size_cv**2)
            # Sorted so that streams are generated in size order (server identity does not matter
            # to the results): the solver then skips its size sort.
            shard = np.sort(self.rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), servers))
            stream_bits = mean_bits * shard  # per server: each of its streams moves this much
        else:
            stream_bits = np.full(servers, mean_bits)
        cap = self.s.cluster.nic_gbps * 1e9 / streams
        pieces = 1
        if self.s.flowlets:
            per_stream = bytes_per_server / streams
            pieces = int(
                min(
                    _MAX_FLOWLETS,
                    self.devices,
                    max(1, round(per_stream / self.s.ecmp.flowlet_bytes)),
                )
            )
        dtype = np.uint16 if self.devices <= 2**16 else np.int64
        device = self.rng.integers(0, self.devices, size=n * pieces, dtype=dtype)
        # Piece i (server i // (streams x pieces)) moves stream_bits[server] / pieces.
        piece_bits = stream_bits if pieces == 1 else stream_bits / pieces
        workspace = self.workspaces.get(n * pieces)
        if workspace is None:
            workspace = self.workspaces[n * pieces] = _Workspace(n * pieces, self.devices)
        solved = workspace.solve(
            device, piece_bits, cap / pieces, self.capacity_bps, streams * pieces
        )
        per_server = _row_max(solved.finish, servers)
        barrier = float(per_server.max())
        # The small-request delay of an interval depends only on how many streams are active on
        # its device, so the delays are weighted per count (a few hundred values at most), not
        # per interval.
        by_active = np.bincount(
            solved.active, weights=solved.dt, minlength=solved.rate_bps.size
        ).astype(np.float64, copy=False)
        demand = np.arange(by_active.size) * (cap / pieces)
        self.delays.add(self.small_delay(np.minimum(1.0, demand / self.capacity_bps)), by_active)
        # Devices are busy while they have streams, then idle until the barrier.
        self.idle_device_seconds(self.devices * barrier - float(solved.dt.sum()))
        return PhaseStats(
            barrier_s=barrier,
            unconstrained_s=float(stream_bits.max()) * streams / (self.s.cluster.nic_gbps * 1e9),
            server_mean_s=float(per_server.mean()),
            max_per_device=int(solved.counts.max()),
            streams=n,
            pieces=n * pieces,
        )


@dataclass(frozen=True)
class TierResult:
    """What one gateway tier does to the training run."""

    name: str
    devices: int
    gbps_per_device: float
    steps: int
    simulated_s: float
    compute_s: float
    ideal_load_s: float  # mean barrier with an infinitely fast gateway (largest shard / NIC)
    dataset_load_s: float
    dataset_load_max_s: float
    server_load_mean_s: float
    data_wait_s: float
    checkpoints: int
    checkpoint_stall_s: float
    ideal_checkpoint_s: float
    small_delay_mean_us: float
    small_delay_p99_us: float
    step_s: float
    training_s: float
    worst_collision: int
    streams: int
    pieces: int
    load_times_s: tuple[float, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (per-step load times left out)."""
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if key == "load_times_s":
                continue
            out[key] = round(value, 6) if isinstance(value, float) else value
        out["training_h"] = round(self.training_s / 3600, 3)
        return out


@dataclass(frozen=True)
class SimulationResult:
    """Results of every tier of a scenario."""

    scenario: str
    seed: int
    servers: int
    peak_gbps: float
    duration_s: float
    tiers: tuple[TierResult, ...]
    # What decided priority and flowlets: "on"/"off" (the scenario's traffic policy) or "flags".
    policy: str = "flags"
    small_priority: bool = False
    flowlets: bool = False

    @property
    def flows(self) -> int:
        """Streams simulated over all tiers (flowlets counted once per stream)."""
        return sum(t.streams for t in self.tiers)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema of `crosszone simulate --json`)."""
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "servers": self.servers,
            "peak_gbps": self.peak_gbps,
            "duration_s": self.duration_s,
            "flows": self.flows,
            "policy": self.policy,
            "small_priority": self.small_priority,
            "flowlets": self.flowlets,
            "tiers": [t.to_json() for t in self.tiers],
        }


def simulate_tier(scenario: Scenario, tier: Tier, seed: int) -> TierResult:
    """Simulate training steps on `tier` until the scenario's duration has elapsed."""
    # The same seed for every tier: identical shard sizes (common random numbers), so differences
    # between tiers come from the tiers, not from the draw.
    model = _TierModel(scenario, tier, np.random.default_rng(seed))
    data, ckpt, train = scenario.dataset, scenario.checkpoint, scenario.training
    loads: list[float] = []
    ideal_loads: list[float] = []
    ideal_stalls: list[float] = []
    server_means: list[float] = []
    stalls: list[float] = []
    waits = 0.0
    worst = 0
    streams = pieces = 0
    elapsed = 0.0
    steps = 0
    while elapsed < scenario.duration:
        load = model.phase(data.bytes_per_server, data.streams, data.size_cv)
        loads.append(load.barrier_s)
        ideal_loads.append(load.unconstrained_s)
        server_means.append(load.server_mean_s)
        worst = max(worst, load.max_per_device)
        streams, pieces = streams + load.streams, pieces + load.pieces
        if train.prefetch:
            step = max(train.compute_per_step, load.barrier_s)
        else:
            step = train.compute_per_step + load.barrier_s
        waits += step - train.compute_per_step
        model.idle(step - load.barrier_s)
        steps += 1
        if steps % ckpt.every_steps == 0:
            write = model.phase(ckpt.bytes_per_server, ckpt.streams, ckpt.size_cv)
            stalls.append(write.barrier_s)
            ideal_stalls.append(write.unconstrained_s)
            worst = max(worst, write.max_per_device)
            streams, pieces = streams + write.streams, pieces + write.pieces
            step += write.barrier_s
        elapsed += step
    if not stalls:
        # The window held no checkpoint; the projection still needs the stall, so measure one
        # (outside the simulated time and the small-request statistics).
        probe = _TierModel(scenario, tier, np.random.default_rng(seed + 1))
        write = probe.phase(ckpt.bytes_per_server, ckpt.streams, ckpt.size_cv)
        stalls.append(write.barrier_s)
        ideal_stalls.append(write.unconstrained_s)
    load_mean = float(np.mean(loads))
    stall_mean = float(np.mean(stalls))
    regular_step = train.compute_per_step + waits / steps
    training_s = train.total_steps * regular_step + (train.total_steps // ckpt.every_steps) * (
        stall_mean
    )
    return TierResult(
        name=tier.name,
        devices=tier.devices,
        gbps_per_device=tier.gbps_per_device,
        steps=steps,
        simulated_s=elapsed,
        compute_s=train.compute_per_step,
        ideal_load_s=float(np.mean(ideal_loads)),
        dataset_load_s=load_mean,
        dataset_load_max_s=float(np.max(loads)),
        server_load_mean_s=float(np.mean(server_means)),
        data_wait_s=waits / steps,
        checkpoints=steps // ckpt.every_steps,
        checkpoint_stall_s=stall_mean,
        ideal_checkpoint_s=float(np.mean(ideal_stalls)),
        small_delay_mean_us=model.delays.mean() * 1e6,
        small_delay_p99_us=model.delays.quantile(0.99) * 1e6,
        step_s=training_s / train.total_steps,
        training_s=training_s,
        worst_collision=worst,
        streams=streams,
        pieces=pieces,
        load_times_s=tuple(loads),
    )


def simulate(scenario: Scenario, seed: int | None = None) -> SimulationResult:
    """Simulate every tier of `scenario` (seed defaults to the scenario's)."""
    seed = scenario.seed if seed is None else seed
    tiers = tuple(simulate_tier(scenario, tier, seed) for tier in scenario.tiers)
    return SimulationResult(
        scenario=scenario.name,
        seed=seed,
        servers=scenario.cluster.servers,
        peak_gbps=scenario.peak_gbps,
        duration_s=scenario.duration,
        tiers=tiers,
        policy="flags" if scenario.policy is None else ("on" if scenario.policy.enabled else "off"),
        small_priority=scenario.small_priority,
        flowlets=scenario.flowlets,
    )
