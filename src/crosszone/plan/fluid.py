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
    # A stable sort by device keeps the size order within each device; on 16-bit device numbers
    # numpy uses a radix sort, linear in the number of streams.
    order = np.argsort(device, kind="stable")
    dev = device[order].astype(np.int64)
    size = bits[order]
    counts = np.bincount(dev, minlength=n_devices)
    starts = np.cumsum(counts) - counts
    group_start = np.repeat(starts, counts)
    active = np.repeat(counts, counts) - (np.arange(n) - group_start)
    prev = np.empty_like(size)
    prev[0] = 0.0
    prev[1:] = size[:-1]
    prev[starts[counts > 0]] = 0.0
    demand = active * cap_bps
    rate = np.minimum(cap_bps, capacity_bps / active)
    dt = (size - prev) / rate
    cum = np.cumsum(dt)
    # Empty devices (count 0) repeat nothing; clamp their start so the gather stays in range.
    first = np.minimum(starts, n - 1)
    finish_sorted = cum - np.repeat(cum[first] - dt[first], counts)
    finish = np.empty(n)
    finish[order] = finish_sorted
    if by_size is not None:
        unsorted = np.empty(n)
        unsorted[by_size] = finish
        finish = unsorted
    utilisation = np.minimum(1.0, demand / capacity_bps)
    return finish, dev, dt, utilisation


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
        self.weighted_sum += float(np.dot(delay_s, weight))
        self.total_weight += float(weight.sum())

    def add_constant(self, delay_s: float, weight: float) -> None:
        self.add(np.array([delay_s]), np.array([weight]))

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
        self.priority = small.priority
        self.delays = _DelayHistogram()

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
            delay = float(self.small_delay(np.zeros(1))[0])
            self.delays.add_constant(delay, device_seconds)

    def phase(self, bytes_per_server: float, streams: int, size_cv: float) -> PhaseStats:
        """Run one synchronised phase: every server moves `bytes_per_server` in `streams` streams."""
        servers = self.s.cluster.servers
        n = servers * streams
        mean_bits = bytes_per_server * 8 / streams
        if size_cv > 0:
            # Shards differ between servers; within a server the streams split the shard evenly.
            sigma2 = math.log1p(size_cv**2)
            # Sorted so that streams are generated in size order (server identity does not matter
            # to the results): the solver then skips its size sort.
            shard = np.sort(self.rng.lognormal(-sigma2 / 2, math.sqrt(sigma2), servers))
            bits = np.repeat(mean_bits * shard, streams)
        else:
            bits = np.full(n, mean_bits)
        cap = self.s.cluster.nic_gbps * 1e9 / streams
        pieces = 1
        if self.s.ecmp.flowlets:
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
        piece_bits = np.repeat(bits / pieces, pieces)
        finish, dev, dt, util = processor_sharing_finish(
            device, piece_bits, cap / pieces, self.capacity_bps, self.devices, sizes_sorted=True
        )
        per_server = finish.reshape(servers, streams * pieces).max(axis=1)
        barrier = float(per_server.max())
        # Devices are busy while they have streams, then idle until the barrier.
        self.delays.add(self.small_delay(util), dt)
        busy = np.bincount(dev, weights=dt, minlength=self.devices)
        self.idle_device_seconds(float(np.sum(barrier - busy)))
        return PhaseStats(
            barrier_s=barrier,
            unconstrained_s=float(bits.max()) * streams / (self.s.cluster.nic_gbps * 1e9),
            server_mean_s=float(per_server.mean()),
            max_per_device=int(np.bincount(dev, minlength=self.devices).max()),
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
    )
