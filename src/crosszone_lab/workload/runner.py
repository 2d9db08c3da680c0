"""Run the workload on every GPU host endpoint at once and summarise it.

One worker process per endpoint namespace (`ip netns exec NS python -m
crosszone_lab.workload.worker`); their JSON progress lines drive a rich progress display, their
result lines are merged into one `WorkloadResult` (throughput per class, small-request latency
percentiles over all endpoints, errors).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table

# The workload stands for applications on GPU hosts, which in a real deployment own their CPUs;
# here they share two cores with the emulated network (routers, gateways, BFD and BGP daemons,
# softirq work in ksoftirqd). At equal priority eight worker processes starve that network when
# anything else also wants the CPU: BFD (150 ms detection) flaps, every flap is a BGP hard reset
# of a gateway, its routes vanish for about a second (IpExtInNoRoutes on gateways and routers),
# and TCP's backed-off retransmissions turn that into 10 s request timeouts (issue 12, finding
# 17). Niced, the applications take what the network leaves, as they would on their own hosts.
WORKLOAD_NICE = 10
# The small-request probes, run apart from the bulk classes (ROLES' "small"), measure the
# network path's delay, as a GPU host's client on its own CPUs would see it. At nice 0 they still
# shared the two cores with the agents, the controller, nginx, Prometheus and each other, and on
# a busy box a probe's process woke to its answer milliseconds late: with the policy on, the same
# deployment, rounds alternating, p99 10.1 and 12.0 ms at nice 0 against 5.8 and 6.6 ms at -10
# (the floor, probes alone, 2.5-3.2 ms either way). Raised, a probe runs when its answer arrives;
# what it measures is then the queues and the softirq work in front of it, the network's part.
PROBE_NICE = -10


@dataclass(frozen=True)
class WorkerEndpoint:
    """One endpoint the workload runs on: its name and the network namespace it lives in."""

    name: str
    ns: str


@dataclass(frozen=True)
class Targets:
    """What the workload needs to know of a deployment, as plain data.

    The emulator (a layer above) builds it from its plan (`emulate.topology.workload_targets`),
    so the workload never imports the emulator.
    """

    endpoints: tuple[WorkerEndpoint, ...]
    servers: tuple[str, ...]  # storage node addresses
    shards: int
    shard_size_mib: int
    checkpoint_max_mib: int


@dataclass
class WorkloadResult:
    duration_s: float
    endpoints: int
    read_bytes: int = 0
    written_bytes: int = 0
    # Range-read bytes as they arrived between the warmup's end and the deadline (worker.py).
    timed_read_bytes: int = 0
    reads: int = 0
    writes: int = 0
    small: int = 0
    errors: int = 0
    small_lat_us: list[int] = field(default_factory=list)
    error_samples: list[str] = field(default_factory=list)
    per_endpoint: dict[str, dict[str, Any]] = field(default_factory=dict)

    def gbps(self, nbytes: int) -> float:
        return nbytes * 8 / self.duration_s / 1e9 if self.duration_s > 0 else 0.0

    def percentile_us(self, q: float) -> float:
        """Latency at quantile q (nearest rank) of all small requests; 0 if none."""
        if not self.small_lat_us:
            return 0.0
        data = sorted(self.small_lat_us)
        idx = min(len(data) - 1, max(0, math.ceil(q * len(data)) - 1))
        return float(data[idx])

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.written_bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "duration_s": round(self.duration_s, 3),
            "endpoints": self.endpoints,
            "loader": {"requests": self.reads, "bytes": self.read_bytes,
                       "gbps": round(self.gbps(self.read_bytes), 3)},
            "checkpoint": {"requests": self.writes, "bytes": self.written_bytes,
                           "gbps": round(self.gbps(self.written_bytes), 3)},
            "small": {"requests": self.small,
                      "rate_per_s": round(self.small / self.duration_s, 1)
                      if self.duration_s else 0.0,
                      "p50_ms": round(self.percentile_us(0.50) / 1000, 3),
                      "p99_ms": round(self.percentile_us(0.99) / 1000, 3),
                      "p999_ms": round(self.percentile_us(0.999) / 1000, 3)},
            "errors": self.errors,
            "error_samples": self.error_samples[:10],
        }


# What one worker process runs: everything (niced), the bulk classes only (niced), or the small
# requests only, raised (PROBE_NICE). A latency-sensitive client measured inside the niced bulk
# process measures that process: its loader threads hold the GIL and, on a loaded box, nice 10
# waits for a CPU. Measured with the policy on, 40 Mbit/s ports and the box's load average at 9:
# small requests 23 ms p50 from the workers, 3.2 ms from a plain client beside them.
ROLES: dict[str, list[str]] = {
    "all": ["--nice", str(WORKLOAD_NICE)],
    "bulk": ["--nice", str(WORKLOAD_NICE), "--small-rate", "0"],
    "small": ["--nice", str(PROBE_NICE), "--loaders", "0", "--ckpt-parallel", "0"],
}


def worker_argv(targets: Targets, ep_index: int, duration: float, loaders: int,
                warmup: float = 0.0, role: str = "all") -> list[str]:
    """Command line of the worker of endpoint number `ep_index`."""
    ep = targets.endpoints[ep_index]
    servers = list(targets.servers)
    # Rotate the server list so that endpoints spread their first connections over nodes.
    servers = servers[ep_index % len(servers):] + servers[:ep_index % len(servers)]
    ckpt = min(8, targets.checkpoint_max_mib) << 20
    return ["ip", "netns", "exec", ep.ns, sys.executable, "-m", "crosszone_lab.workload.worker",
            "--name", ep.name, "--servers", ",".join(servers), "--duration", str(duration),
            "--loaders", str(loaders), "--shards", str(targets.shards),
            "--shard-bytes", str(targets.shard_size_mib << 20),
            "--block-bytes", str(min(4, targets.shard_size_mib) << 20),
            "--ckpt-bytes", str(ckpt), "--seed", str(ep_index + 1),
            ] + (["--warmup", str(warmup)] if warmup else []) + ROLES[role]


def _live_table(progress: dict[str, dict[str, Any]], elapsed: float, duration: float) -> Table:
    read = sum(p.get("read_bytes", 0) for p in progress.values())
    wrote = sum(p.get("written_bytes", 0) for p in progress.values())
    small = sum(p.get("small", 0) for p in progress.values())
    errs = sum(p.get("errors", 0) for p in progress.values())
    t = Table(title=f"workload {min(elapsed, duration):.0f}/{duration:.0f} s, "
                    f"{len(progress)} endpoints")
    for col in ("loader Gbps", "checkpoint Gbps", "small req", "errors"):
        t.add_column(col, justify="right")
    el = max(elapsed, 1e-3)
    t.add_row(f"{read * 8 / el / 1e9:.2f}", f"{wrote * 8 / el / 1e9:.2f}", str(small), str(errs))
    return t


def run(targets: Targets, duration: float = 15.0, loaders: int = 2,
        console: Console | None = None, warmup: float = 0.0, bulk: bool = True,
        loaders_for: dict[str, int] | None = None,
        small_apart: bool = False,
        on_progress: Callable[[str, dict[str, Any]], None] | None = None,
        stop: threading.Event | None = None) -> WorkloadResult:
    """Run the workers of every endpoint, show progress, return the merged result.

    Small requests of the first `warmup` seconds are untimed; without `bulk`, small requests
    only; `loaders_for`: range readers of some endpoints, by name (a greedy tenant's); with
    `small_apart`, each endpoint's small requests run in a process of their own (ROLES);
    `on_progress` sees every progress line as it arrives (a benchmark attributes errors to time
    with it); setting `stop` ends the run early (workers killed: they give no result)."""
    console = console or Console()
    more = loaders_for or {}
    roles = ["all"] if bulk and not small_apart else (["bulk", "small"] if bulk else ["small"])
    procs = {(ep.name if role != "small" or len(roles) == 1 else f"{ep.name}/small"):
             subprocess.Popen(worker_argv(targets, i, duration, more.get(ep.name, loaders),
                                          warmup, role),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, ep in enumerate(targets.endpoints) for role in roles}
    progress: dict[str, dict[str, Any]] = {name: {} for name in procs}
    results: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def reader(name: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                doc = json.loads(line)
            except json.JSONDecodeError:
                continue
            if on_progress is not None:
                on_progress(name, doc)
            with lock:
                if doc.get("type") == "result":
                    results[name] = doc
                progress[name] = doc

    readers = [threading.Thread(target=reader, args=(n, p), daemon=True)
               for n, p in procs.items()]
    for t in readers:
        t.start()
    start = time.monotonic()
    hard_stop = start + duration + 30
    try:
        with Live(console=console, refresh_per_second=2, transient=True) as live:
            while any(p.poll() is None for p in procs.values()):
                if time.monotonic() > hard_stop or (stop is not None and stop.is_set()):
                    break
                with lock:
                    live.update(_live_table(progress, time.monotonic() - start, duration))
                time.sleep(0.5)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait()
    for t in readers:
        t.join(timeout=2)
    res = WorkloadResult(duration_s=duration, endpoints=len(targets.endpoints))
    for name, proc in procs.items():
        doc = results.get(name)
        if doc is None:
            err = proc.stderr.read()[-300:] if proc.stderr else ""
            res.errors += 1
            res.error_samples.append(
                f"{name}: worker gave no result (exit {proc.returncode}) {err}")
            continue
        res.duration_s = max(res.duration_s, float(doc.get("elapsed_s", duration)))
        res.read_bytes += int(doc["read_bytes"])
        res.timed_read_bytes += int(doc["timed_read_bytes"])
        res.written_bytes += int(doc["written_bytes"])
        res.reads += int(doc["reads"])
        res.writes += int(doc["writes"])
        res.small += int(doc["small"])
        res.errors += int(doc["errors"])
        res.small_lat_us += list(doc.get("small_lat_us", []))
        res.error_samples += [f"{name}: {e}" for e in doc.get("error_samples", [])]
        ep = res.per_endpoint.setdefault(name.split("/")[0], {
            "read_bytes": 0, "timed_read_bytes": 0, "written_bytes": 0, "small": 0, "errors": 0,
            "small_lat_us": []})
        for k in ("read_bytes", "timed_read_bytes", "written_bytes", "small", "errors"):
            ep[k] += int(doc[k])
        ep["small_lat_us"] += list(doc.get("small_lat_us", []))
    return res


def summary_table(res: WorkloadResult, title: str = "workload summary") -> Table:
    """Throughput per class, small-request latency, errors."""
    j = res.to_json()
    t = Table(title=title)
    t.add_column("class")
    t.add_column("requests", justify="right")
    t.add_column("Gbps", justify="right")
    t.add_column("latency p50 / p99 / p999 ms", justify="right")
    t.add_row("data loader (range reads)", str(j["loader"]["requests"]),
              f"{j['loader']['gbps']:.2f}", "")
    t.add_row("checkpoint writer (PUT)", str(j["checkpoint"]["requests"]),
              f"{j['checkpoint']['gbps']:.2f}", "")
    s = j["small"]
    t.add_row("small requests", str(s["requests"]), "",
              f"{s['p50_ms']:.2f} / {s['p99_ms']:.2f} / {s['p999_ms']:.2f}")
    t.add_row("errors", str(res.errors), "", "; ".join(res.error_samples[:2]))
    return t
