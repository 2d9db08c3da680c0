"""`crosszone bench store-watch`: what a SQLite watch costs idle, and how soon it sees a change.

The embedded store's watch (store/sqlite_store.py) either polls every `poll_s` (2 ms) or waits on
inotify for the database's files to change. Both are measured in the same run, in turns, so the
box's load is the same for both:

- `idle_cpu_share`: the watching process's CPU time over `--idle` seconds of a watch on a store
  nobody writes (the share of one core an idle agent pays for watching);
- `deliver_ms`: from a write committed by another process (as the controller writes and an
  agent watches) to the watch returning it, p50/p99/max over `--writes` writes spaced 5-25 ms
  apart. The writer stamps each value with CLOCK_MONOTONIC, which both processes share.

One JSON line per mode and round, then a summary with the medians per mode and the ratios
notify/poll. Prints JSON; never an assertion.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crosszone.store.sqlite_store import SqliteStore

MODES = ("poll", "notify")


def write(db: str, writes: int, seed: int) -> None:
    """The writer process: `writes` puts under w/, each value its commit's start (ns)."""
    store = SqliteStore(db)
    rnd = random.Random(seed)
    for i in range(writes):
        time.sleep(rnd.uniform(0.005, 0.025))
        store.put_many({f"w/{i}": str(time.monotonic_ns()).encode()})
    store.close()


def idle_share(db: str, notify: bool, seconds: float) -> float:
    """CPU share of one core this process spends in one watch of `seconds` that sees nothing."""
    store = SqliteStore(db, notify=notify)
    rev = store.revision()
    c0, t0 = time.process_time(), time.monotonic()
    got = store.watch("idle/", rev, seconds)
    share = (time.process_time() - c0) / (time.monotonic() - t0)
    store.close()
    if got:
        raise RuntimeError("the idle store was written to")
    return share


def deliver_ms(db: str, notify: bool, writes: int, seed: int) -> list[float]:
    """Write-to-watch delays (ms) of `writes` writes by another process."""
    store = SqliteStore(db, notify=notify)
    rev = store.revision()
    writer = subprocess.Popen([sys.executable, "-m", "crosszone_lab.bench.store_watch",
                               "--write", db, "--writes", str(writes), "--seed", str(seed)])
    out: list[float] = []
    try:
        deadline = time.monotonic() + 10 + writes * 0.05
        while len(out) < writes and time.monotonic() < deadline:
            for ev in store.watch("w/", rev, 1.0):
                now = time.monotonic_ns()
                rev = max(rev, ev.revision)
                if ev.value is not None:
                    out.append((now - int(ev.value)) / 1e6)
    finally:
        writer.wait(timeout=30)
        store.close()
    if len(out) < writes:
        raise RuntimeError(f"saw {len(out)} of {writes} writes")
    return out


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def run(emit: Callable[[dict[str, Any]], None], rounds: int = 3, idle: float = 5.0,
        writes: int = 200) -> dict[str, Any]:
    """The whole benchmark; returns (and emits last) the summary."""
    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="czwatch-") as tmp:
        for rnd in range(rounds):
            for mode in (MODES if rnd % 2 == 0 else MODES[::-1]):
                db = str(Path(tmp) / f"{mode}-{rnd}.db")
                SqliteStore(db).close()
                d = deliver_ms(db, mode == "notify", writes, seed=rnd)
                line = {"mode": mode, "round": rnd,
                        "idle_cpu_share": round(idle_share(db, mode == "notify", idle), 4),
                        "deliver_ms": {"p50": round(_pct(d, 0.5), 3),
                                       "p99": round(_pct(d, 0.99), 3),
                                       "max": round(max(d), 3)},
                        "writes": len(d)}
                lines.append(line)
                emit(line)

    def med(mode: str, value: Callable[[dict[str, Any]], float]) -> float:
        return float(statistics.median(value(ln) for ln in lines if ln["mode"] == mode))

    out: dict[str, Any] = {"summary": True}
    for mode in MODES:
        out[mode] = {"idle_cpu_share": round(med(mode, lambda ln: ln["idle_cpu_share"]), 4),
                     "deliver_p50_ms": round(med(mode, lambda ln: ln["deliver_ms"]["p50"]), 3),
                     "deliver_p99_ms": round(med(mode, lambda ln: ln["deliver_ms"]["p99"]), 3)}
    for key in ("idle_cpu_share", "deliver_p50_ms", "deliver_p99_ms"):
        base = out["poll"][key]
        out[f"{key}_notify_over_poll"] = round(out["notify"][key] / base, 3) if base else None
    emit(out)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", metavar="DB", help="be the writer process (internal)")
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--idle", type=float, default=5.0)
    a = ap.parse_args(argv)
    if a.writes < 1 or a.rounds < 1 or a.idle <= 0:
        ap.error("--writes and --rounds at least 1, --idle above 0")
    if a.write:
        write(a.write, a.writes, a.seed)
    else:
        run(lambda ln: print(json.dumps(ln), flush=True), a.rounds, a.idle, a.writes)


if __name__ == "__main__":
    main()
