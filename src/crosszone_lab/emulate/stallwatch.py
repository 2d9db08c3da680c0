"""How long each CPU could not run a real-time thread: the evidence behind a BFD flap.

bfdd runs at SCHED_FIFO 10 (`frr.BFDD_RT_PRIORITY`). If a CPU cannot run a real-time thread for
longer than BFD's detection time (the hypervisor did not run the virtual CPU, or the kernel sat
in one long system call: this kernel does not preempt system calls), every session timed on that
CPU goes down, whatever bfdd does. `StallWatch` runs one sentinel process per CPU, pinned and at a
higher real-time priority than bfdd, that sleeps 2 ms in a loop and records every wake-up that
came more than `threshold_ms` late, with the steal time the kernel counted meanwhile. A session
that went down with no stall of that size next to it is a flap the emulation caused itself.

`python -m crosszone_lab.emulate.stallwatch --cpu N --out FILE` is the sentinel; one line per stall:
`<wall-clock ns at wake-up> <gap ms> <steal ms>`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Above bfdd's SCHED_FIFO 10, so the sentinel sees what bfdd would at best.
SENTINEL_PRIORITY = 50
SLEEP_S = 0.002
_TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Stall:
    """A CPU that ran no real-time thread for `gap_ms`, up to `end_ns` (wall clock)."""

    cpu: int
    end_ns: int
    gap_ms: float
    steal_ms: float

    @property
    def start_ns(self) -> int:
        return self.end_ns - int(self.gap_ms * 1e6)

    def to_json(self) -> dict[str, object]:
        return {"cpu": self.cpu, "end_ns": self.end_ns, "gap_ms": round(self.gap_ms, 1),
                "steal_ms": round(self.steal_ms, 1)}


def _steal_ms(cpu: int) -> float:
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                return int(line.split()[8]) * _TICK_MS
    return 0.0


def sentinel(cpu: int, out: Path, threshold_ms: float, priority: int) -> None:
    """Run until SIGTERM: sleep, measure how late the wake-up was, record the large ones."""
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except PermissionError:
        print("stallwatch: no real-time priority (not root): gaps include normal scheduling",
              file=sys.stderr)
    stop = False

    def _stop(_sig: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    with out.open("a", buffering=1) as f:
        prev, steal = time.monotonic(), _steal_ms(cpu)
        while not stop:
            time.sleep(SLEEP_S)
            now = time.monotonic()
            gap_ms = (now - prev) * 1000
            if gap_ms > threshold_ms:
                s = _steal_ms(cpu)
                f.write(f"{time.time_ns()} {gap_ms:.2f} {s - steal:.1f}\n")
                steal = s
            elif int(now) != int(prev):
                steal = _steal_ms(cpu)  # steal counted since about a second ago at most
            prev = now


def parse(cpu: int, text: str) -> list[Stall]:
    out = []
    for line in text.splitlines():
        parts = line.split()
        try:
            out.append(Stall(cpu, int(parts[0]), float(parts[1]), float(parts[2])))
        except (ValueError, IndexError):
            continue  # a line cut short when the sentinel was stopped
    return out


class StallWatch:
    """One sentinel per CPU for the duration of a `with` block; `stalls` afterwards."""

    def __init__(self, threshold_ms: float = 20.0, priority: int = SENTINEL_PRIORITY) -> None:
        self.threshold_ms = threshold_ms
        self.priority = priority
        self.stalls: list[Stall] = []
        self._dir: Path | None = None
        self._procs: list[tuple[int, subprocess.Popen[bytes]]] = []

    def __enter__(self) -> StallWatch:
        self._dir = Path(tempfile.mkdtemp(prefix="czstall-"))
        for cpu in sorted(os.sched_getaffinity(0)):
            self._procs.append((cpu, subprocess.Popen(
                [sys.executable, "-m", "crosszone_lab.emulate.stallwatch", "--cpu", str(cpu),
                 "--out", str(self._dir / f"{cpu}.txt"), "--threshold-ms",
                 str(self.threshold_ms), "--priority", str(self.priority)],
                stderr=subprocess.DEVNULL)))
        return self

    def __exit__(self, *_exc: object) -> None:
        assert self._dir is not None
        try:
            for _cpu, proc in self._procs:
                proc.terminate()
            for _cpu, proc in self._procs:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for cpu, _proc in self._procs:
                f = self._dir / f"{cpu}.txt"
                if f.exists():
                    self.stalls += parse(cpu, f.read_text())
            self.stalls.sort(key=lambda s: s.end_ns)
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def worst_ms(self) -> float:
        return max((s.gap_ms for s in self.stalls), default=0.0)

    def explaining(self, t_ns: int, min_gap_ms: float, cpus: set[int] | None = None,
                   before_s: float = 1.0, after_s: float = 0.2) -> Stall | None:
        """The largest stall of at least `min_gap_ms` on one of `cpus` (any if None) that ended
        between `before_s` before and `after_s` after `t_ns` (an event a stalled daemon logged
        once it ran again)."""
        near = [s for s in self.stalls if s.gap_ms >= min_gap_ms
                and (cpus is None or s.cpu in cpus)
                and t_ns - before_s * 1e9 <= s.end_ns <= t_ns + after_s * 1e9]
        return max(near, key=lambda s: s.gap_ms, default=None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threshold-ms", type=float, default=20.0)
    ap.add_argument("--priority", type=int, default=SENTINEL_PRIORITY)
    a = ap.parse_args()
    sentinel(a.cpu, a.out, a.threshold_ms, a.priority)


if __name__ == "__main__":
    main()
