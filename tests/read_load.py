"""Write latency under open reads (issue 26, point 2), on a real controller process.

A controller (SQLite store, its own process, as deployed) holds an intent with `prefixes` pool
routes. One client makes single-route changes (`POST /v1/pools/p0/prefixes`, one /24 added) and
times each call, first with nothing else going on, then while `readers` unauthenticated loops
of `GET /v1/intent` run in another process (threads reading whole answers and dropping them).
The figure is the median change latency of each phase.

`--before COMMIT` measures the controller of that commit too (its `src/` exported with
`git archive` into a temporary directory and put first on PYTHONPATH), in the same run, so
the two figures share the machine's load:

    .venv/bin/python tests/read_load.py --before ca83045

Everything started here (controllers, readers, temporary directories) is stopped and removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "read-load"

# The readers: threads that GET one URL in a loop until SIGTERM, then print how many reads
# they made and in how many seconds.
READERS = r"""
import http.client, signal, sys, threading, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
count = [0] * n
def loop(i):
    c = http.client.HTTPConnection(host, port, timeout=60)
    while not stop.is_set():
        c.request("GET", "/v1/intent")
        r = c.getresponse()
        r.read()
        if r.status != 200:
            raise SystemExit(f"GET /v1/intent answered {r.status}")
        count[i] += 1
t0 = time.monotonic()
threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(n)]
for t in threads:
    t.start()
stop.wait()
print(sum(count), time.monotonic() - t0, flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _controller(tmp: Path, src: Path | None) -> tuple[subprocess.Popen, str]:
    """A controller process on a fresh SQLite store; src: a source tree to run instead."""
    port = _free_port()
    env = {**os.environ, "CROSSZONE_TOKEN": TOKEN}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    log = open(tmp / "controller.log", "w")  # noqa: SIM115  (the process keeps it)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from crosszone.cli import main; main()", "controller",
         "--store", f"sqlite://{tmp}/state.db", "--listen", f"127.0.0.1:{port}"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(url + "/healthz", timeout=1)
            return proc, url
        except httpx.HTTPError:
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    _stop(proc)
    raise RuntimeError(f"controller did not start: {(tmp / 'controller.log').read_text()}")


def _changes(client: httpx.Client, first: int, n: int) -> list[float]:
    """n single-route changes (each adds a new /24 to pool p0); milliseconds each."""
    out = []
    for i in range(first, first + n):
        a = (30 << 24) + (i << 8)
        prefix = f"{a >> 24}.{(a >> 16) & 255}.{(a >> 8) & 255}.0/24"
        t0 = time.perf_counter()
        r = client.post("/v1/pools/p0/prefixes", json={"add": [prefix]})
        out.append((time.perf_counter() - t0) * 1000)
        r.raise_for_status()
    return out


def measure(src: Path | None, prefixes: int = 100_000, readers: int = 8,
            changes: int = 100) -> dict:
    """Median single-route change latency without and with the read loops, for the
    controller in src (None: this checkout)."""
    from crosszone_lab.bench.control import synthetic

    tmp = Path(tempfile.mkdtemp(prefix="cz-read-load-"))
    proc = reader = None
    try:
        proc, url = _controller(tmp, src)
        client = httpx.Client(base_url=url, timeout=120,
                              headers={"Authorization": f"Bearer {TOKEN}"})
        client.post("/v1/intent", content=synthetic(prefixes, 0).encode()).raise_for_status()
        size = len(httpx.get(url + "/v1/intent", timeout=120).content)
        _changes(client, 0, 10)  # warm up: first changes sort the pool's keys
        quiet = _changes(client, 10, changes)
        reader = subprocess.Popen([sys.executable, "-c", READERS, "127.0.0.1",
                                   url.rsplit(":", 1)[1], str(readers)],
                                  stdout=subprocess.PIPE, text=True)
        time.sleep(2)  # every reader in its loop
        loaded = _changes(client, 10 + changes, changes)
        reader.send_signal(signal.SIGTERM)
        out, _ = reader.communicate(timeout=120)
        if reader.returncode != 0 or not out.strip():
            raise RuntimeError(f"the readers failed (exit {reader.returncode})")
        reads, seconds = out.split()
        client.close()
        return {"quiet_p50_ms": round(statistics.median(quiet), 1),
                "loaded_p50_ms": round(statistics.median(loaded), 1),
                "loaded_p90_ms": round(statistics.quantiles(loaded, n=10)[-1], 1),
                "reads_per_s": round(int(reads) / float(seconds), 1),
                "intent_bytes": size, "prefixes": prefixes, "readers": readers,
                "changes": changes}
    finally:
        if reader is not None:
            _stop(reader)
        if proc is not None:
            _stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    """Print one JSON line per controller measured (before, if asked, then this checkout)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", help="a commit whose controller to measure too")
    ap.add_argument("--prefixes", type=int, default=100_000)
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--changes", type=int, default=100)
    args = ap.parse_args()
    kw = {"prefixes": args.prefixes, "readers": args.readers, "changes": args.changes}
    if args.before:
        tmp = Path(tempfile.mkdtemp(prefix="cz-before-"))
        try:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.before, "src"],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive, check=True)
            print(json.dumps({"controller": args.before, **measure(tmp / "src", **kw)}),
                  flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps({"controller": "this checkout", **measure(None, **kw)}), flush=True)
    print(json.dumps({"loadavg": os.getloadavg(), "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
