"""One workload endpoint: AI training storage traffic from inside a VPC namespace.

Run as `python -m crosszone_lab.workload.worker ...` inside an endpoint namespace. Three classes:

- data loader: `--loaders` threads, each issuing back-to-back large range reads (default 4 MiB)
  of random blocks of random dataset shards;
- checkpoint writer: every `--ckpt-interval` seconds a burst of `--ckpt-parallel` PUTs of
  `--ckpt-bytes` each (overwriting the same names, so storage use stays bounded);
- small requests: a steady `--small-rate` per second, alternating metadata lookups (JSON) and
  4 KiB range reads; each one's latency is recorded.

Every response is checked (status, length, JSON); anything else is an error. A progress line
(JSON) goes to stdout every second and a result line at the end. Work stops at the deadline or
after `--max-requests`, whichever comes first.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

SMALL_BYTES = 4096
# Every CKPT_INTERVAL_S a burst of CKPT_PARALLEL checkpoint PUTs (the command line's defaults).
CKPT_INTERVAL_S = 4.0
CKPT_PARALLEL = 2


@dataclass
class Counters:
    """Shared by the worker's threads; guarded by `lock`."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    read_bytes: int = 0
    reads: int = 0
    # Range-read bytes as they arrive, between the end of the warmup and the deadline: the
    # goodput of that window. read_bytes counts whole blocks when they complete, in flight ones
    # after the deadline too, which favours whoever has more connections open at the end.
    timed_read_bytes: int = 0
    written_bytes: int = 0
    writes: int = 0
    small: int = 0
    small_lat_us: list[int] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    requests: int = 0

    def error(self, what: str) -> None:
        with self.lock:
            self.errors += 1
            if len(self.error_samples) < 5:
                self.error_samples.append(what)


class Client:
    """A keep-alive HTTP connection that reconnects after a failure."""

    def __init__(self, host: str, timeout: float) -> None:
        self.host, self.timeout = host, timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, 80, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            return self.conn.getresponse()
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


#: Bytes asked of the socket at a time: HTTPResponse.readinto over a buffered socket file fills
#: the whole slice it is given before it returns, so a block read in one call is counted (by
#: `on_bytes`, the timed goodput) only once complete: at 25 Mbit/s a 4 MiB block shared by 8
#: connections takes 10 s, as long as a timed window, and the window saw a few whole blocks.
READ_SLICE = 64 * 1024


def _read_exact(resp: http.client.HTTPResponse, buf: memoryview,
                on_bytes: Callable[[int], None] | None = None) -> int:
    """Read until `buf` is full or the response ends; `on_bytes` sees the size of every slice
    (READ_SLICE at most) as it arrives."""
    got = 0
    while got < len(buf):
        n = resp.readinto(buf[got:got + READ_SLICE])
        if not n:
            break
        got += n
        if on_bytes is not None:
            on_bytes(n)
    return got


@dataclass(frozen=True)
class Config:
    name: str
    servers: tuple[str, ...]
    duration: float
    loaders: int
    block_bytes: int
    shards: int
    shard_bytes: int
    ckpt_bytes: int
    ckpt_interval: float
    ckpt_parallel: int
    small_rate: float
    max_requests: int
    seed: int
    timeout: float = 10.0
    # Small requests sent in the first `warmup` seconds are not timed: while every connection
    # of a fresh run is young, a size-based policy (PIAS) still counts the bulk ones as small.
    warmup: float = 0.0


class Worker:
    """Runs the three traffic classes until the deadline."""

    def __init__(self, cfg: Config, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg, self.clock = cfg, clock
        self.c = Counters()
        self.deadline = clock() + cfg.duration
        self.timed_from = clock() + cfg.warmup
        self.stop = threading.Event()

    def _running(self) -> bool:
        if self.stop.is_set() or self.clock() >= self.deadline:
            return False
        with self.c.lock:
            if self.c.requests >= self.cfg.max_requests:
                return False
            self.c.requests += 1
        return True

    def count_read(self, n: int) -> None:
        """Add `n` range-read bytes that arrived now to the timed window's count."""
        if self.timed_from <= self.clock() < self.deadline:
            with self.c.lock:
                self.c.timed_read_bytes += n

    def loader(self, idx: int) -> None:
        cfg = self.cfg
        rng = random.Random(cfg.seed * 1000 + idx)
        client = Client(cfg.servers[idx % len(cfg.servers)], cfg.timeout)
        buf = memoryview(bytearray(cfg.block_bytes))
        blocks = max(1, cfg.shard_bytes // cfg.block_bytes)
        while self._running():
            shard, block = rng.randrange(cfg.shards), rng.randrange(blocks)
            start = block * cfg.block_bytes
            rng_hdr = f"bytes={start}-{start + cfg.block_bytes - 1}"
            try:
                resp = client.request("GET", f"/dataset/shard-{shard:05d}.bin",
                                      headers={"Range": rng_hdr})
                got = _read_exact(resp, buf, self.count_read)
                if resp.status != 206 or got != cfg.block_bytes:
                    self.c.error(f"range read: status {resp.status}, {got} bytes")
                    client.close()
                    continue
            except (OSError, http.client.HTTPException) as exc:
                self.c.error(f"range read: {exc!r}")
                continue
            with self.c.lock:
                self.c.read_bytes += got
                self.c.reads += 1
        client.close()

    def _put(self, client: Client, path: str, body: bytes) -> None:
        try:
            resp = client.request("PUT", path, body=body,
                                  headers={"Content-Type": "application/octet-stream"})
            resp.read()
            if resp.status not in (200, 201, 204):
                self.c.error(f"checkpoint PUT: status {resp.status}")
                return
        except (OSError, http.client.HTTPException) as exc:
            self.c.error(f"checkpoint PUT: {exc!r}")
            return
        with self.c.lock:
            self.c.written_bytes += len(body)
            self.c.writes += 1

    def checkpointer(self) -> None:
        cfg = self.cfg
        body = bytes(cfg.ckpt_bytes)
        clients = [Client(cfg.servers[k % len(cfg.servers)], cfg.timeout)
                   for k in range(cfg.ckpt_parallel)]
        next_burst = self.clock() + min(1.0, cfg.ckpt_interval)
        while not self.stop.is_set() and self.clock() < self.deadline:
            if self.clock() < next_burst:
                time.sleep(min(0.05, max(0.0, next_burst - self.clock())))
                continue
            threads = []
            for k, client in enumerate(clients):
                if not self._running():
                    break
                t = threading.Thread(target=self._put,
                                     args=(client, f"/ckpt/{cfg.name}/part-{k}.bin", body))
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
            next_burst += cfg.ckpt_interval
        for client in clients:
            client.close()

    def small(self) -> None:
        cfg = self.cfg
        rng = random.Random(cfg.seed * 7919)
        clients = [Client(s, cfg.timeout) for s in cfg.servers]
        period = 1.0 / cfg.small_rate
        nxt = self.clock()
        k = 0
        buf = memoryview(bytearray(SMALL_BYTES))
        while self._running():
            now = self.clock()
            if now < nxt:
                time.sleep(nxt - now)
            nxt += period
            client = clients[k % len(clients)]
            shard = rng.randrange(cfg.shards)
            t0 = time.perf_counter()
            try:
                if k % 2 == 0:
                    resp = client.request("GET", f"/meta/shard-{shard:05d}.json")
                    doc = json.loads(resp.read())
                    ok = resp.status == 200 and doc.get("shard") == shard
                else:
                    start = rng.randrange(max(1, cfg.shard_bytes // SMALL_BYTES)) * SMALL_BYTES
                    resp = client.request("GET", f"/dataset/shard-{shard:05d}.bin", headers={
                        "Range": f"bytes={start}-{start + SMALL_BYTES - 1}"})
                    ok = resp.status == 206 and _read_exact(resp, buf) == SMALL_BYTES
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.c.error(f"small request: {exc!r}")
                k += 1
                continue
            lat = int((time.perf_counter() - t0) * 1e6)
            k += 1
            if not ok:
                self.c.error("small request: bad response")
                client.close()
                continue
            with self.c.lock:
                self.c.small += 1
                if now >= self.timed_from:
                    self.c.small_lat_us.append(lat)
        for client in clients:
            client.close()

    def snapshot(self, kind: str) -> dict[str, object]:
        with self.c.lock:
            doc: dict[str, object] = {
                "type": kind, "name": self.cfg.name, "read_bytes": self.c.read_bytes,
                "timed_read_bytes": self.c.timed_read_bytes, "reads": self.c.reads,
                "written_bytes": self.c.written_bytes, "writes": self.c.writes,
                "small": self.c.small, "errors": self.c.errors,
            }
            if kind == "result":
                doc["small_lat_us"] = list(self.c.small_lat_us)
                doc["error_samples"] = list(self.c.error_samples)
        return doc

    def run(self, emit: Callable[[dict[str, object]], None]) -> dict[str, object]:
        threads = [threading.Thread(target=self.loader, args=(i,), daemon=True)
                   for i in range(self.cfg.loaders)]
        threads.append(threading.Thread(target=self.checkpointer, daemon=True))
        if self.cfg.small_rate > 0:
            threads.append(threading.Thread(target=self.small, daemon=True))
        t0 = self.clock()
        for t in threads:
            t.start()
        last = t0
        while any(t.is_alive() for t in threads):
            time.sleep(0.2)
            if self.clock() - last >= 1.0:
                last = self.clock()
                emit(self.snapshot("progress"))
            # In-flight requests get one timeout after the deadline, then we give up on them.
            if self.clock() > self.deadline + self.cfg.timeout + 1:
                self.stop.set()
                self.c.error("requests still running after the deadline")
                break
        result = self.snapshot("result")
        result["elapsed_s"] = self.clock() - t0
        return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", required=True)
    ap.add_argument("--servers", required=True, help="comma-separated storage addresses")
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--loaders", type=int, default=2)
    ap.add_argument("--block-bytes", type=int, default=4 << 20)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--shard-bytes", type=int, default=64 << 20)
    ap.add_argument("--ckpt-bytes", type=int, default=8 << 20)
    ap.add_argument("--ckpt-interval", type=float, default=CKPT_INTERVAL_S)
    ap.add_argument("--ckpt-parallel", type=int, default=CKPT_PARALLEL)
    ap.add_argument("--small-rate", type=float, default=40.0)
    ap.add_argument("--max-requests", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--warmup", type=float, default=0.0,
                    help="seconds at the start whose small requests are not timed")
    ap.add_argument("--nice", type=int, default=0,
                    help="change this process's niceness by N: positive lowers its priority "
                         "(runner.WORKLOAD_NICE says why), negative raises it and needs root "
                         "(runner.PROBE_NICE)")
    a = ap.parse_args(argv)
    if a.nice:
        try:
            os.nice(a.nice)
        except PermissionError:
            ap.error(f"--nice {a.nice}: raising a process's priority needs root "
                     "(CAP_SYS_NICE)")
    cfg = Config(a.name, tuple(a.servers.split(",")), a.duration, a.loaders, a.block_bytes,
                 a.shards, a.shard_bytes, a.ckpt_bytes, a.ckpt_interval, a.ckpt_parallel,
                 a.small_rate, a.max_requests, a.seed, warmup=a.warmup)

    def emit(doc: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(doc) + "\n")
        sys.stdout.flush()

    result = Worker(cfg).run(emit)
    emit(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
