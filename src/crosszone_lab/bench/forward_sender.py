"""The generators of `crosszone bench forward`: one warm sender per path, measured in slices.

`open_sender(...)` starts a sender on a path's g0 and lets it warm up; its `measure()` runs one
measured phase (the bench's `--seconds`) and returns what it sent, in how many ns, and the busy
ns of its CPU over that phase. The bench keeps one per path and alternates them, so rows are
measured a few seconds apart however long the run.

- `CzSender` drives build/cz_sender (bench/sender/cz_sender.c) in the path's generator
  namespace: modes af_xdp, tx_ring and sendmmsg. It reads the CPU's busy time itself, around
  its phase only.
- `LiveFramesSender` is the former generator, a live-frames test run of
  bpf/bench_forward_gen.c (XDP_TX with ingress g0), for comparison where the kernel allows it.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from crosszone.abi.objects import BUILD_DIR
from crosszone.linux.environment import EnvironmentProblem

#: The sender program, built by `make build` from bench/sender/cz_sender.c.
SENDER = BUILD_DIR / "cz_sender"
#: cz_sender's three modes, then the former live-frames test run (where allowed).
SENDERS = ("af_xdp", "tx_ring", "sendmmsg", "live_frames")
#: The fastest here (docs/emulate.md: af_xdp against tx_ring and sendmmsg, same run).
DEFAULT_SENDER = "af_xdp"
DESCRIPTION = {
    "af_xdp": "cz_sender: AF_XDP socket, copy mode, transmit ring",
    "tx_ring": "cz_sender: AF_PACKET TPACKET_V2 transmit ring, PACKET_QDISC_BYPASS",
    "sendmmsg": "cz_sender: AF_PACKET sendmmsg of 64 frames, PACKET_QDISC_BYPASS",
    "live_frames": "BPF_PROG_TEST_RUN live frames, batch 64, XDP_TX (header rewrite)",
}
GEN_HEADER_BYTES = 96  # struct hdr of bpf/bench_forward_gen.c: rewritten on every run
LIVE_CHUNK = 50_000  # frames per live-frames test run
USER_HZ_NS = 10_000_000  # /proc/stat counts in USER_HZ (100) ticks


class Sender(Protocol):
    """A warm sender on one path."""

    def measure(self) -> dict[str, Any]:
        """One measured phase: {"sent", "errors", "ns", "busy_ns", "mode"}."""
        ...


def cpu_busy_ns(cpu: int) -> int:
    """Busy ns of one CPU since boot (/proc/stat: user, nice, system, irq, softirq, steal)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            f = [int(x) for x in line.split()[1:]]
            return (f[0] + f[1] + f[2] + f[5] + f[6] + (f[7] if len(f) > 7 else 0)) * USER_HZ_NS
    raise EnvironmentProblem(f"cpu{cpu} in /proc/stat", "not found")


class CzSender:
    """build/cz_sender in `ns`, warmed up, waiting for a line per measured phase."""

    def __init__(self, proc: subprocess.Popen[str], what: str) -> None:
        self.proc = proc
        self.what = what

    def failed(self) -> EnvironmentProblem:
        """The sender died or answered nonsense: its own error line is the answer."""
        self.proc.kill()
        err = self.proc.stderr.read().strip() if self.proc.stderr else ""
        return EnvironmentProblem(self.what, err or "exited without a report")

    def measure(self) -> dict[str, Any]:
        """Run one phase; the sender's report."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise self.failed() from None
        try:
            return dict(json.loads(self.proc.stdout.readline()))
        except (json.JSONDecodeError, TypeError, ValueError):
            raise self.failed() from None


class LiveFramesSender:
    """The former generator: live-frames test runs of cz_bench_gen with ingress g0. Only
    built after forward.check_sender's probe (fastpath/live_frames.py) found live frames
    allowed; where refused, `bench forward --sender live_frames` ends in one line, exit 2."""

    def __init__(self, gen_obj: Path, ns: str, g0: int, frame: bytes, seconds: float,
                 cpu: int) -> None:
        from crosszone.fastpath.libbpf import BpfObject, xdp_ctx

        self.obj = BpfObject.open(gen_obj)
        self.obj.map("gen_hdr").update((0).to_bytes(4, "little"), frame[:GEN_HEADER_BYTES])
        self.ns, self.frame, self.seconds, self.cpu = ns, frame, seconds, cpu
        self.ctx = xdp_ctx(g0)
        self._run(0.2)  # warm-up

    def _run(self, seconds: float) -> dict[str, Any]:
        from crosszone.fastpath.libbpf import BPF_F_TEST_XDP_LIVE_FRAMES
        from crosszone.linux.netns import in_netns

        prog = self.obj.program("cz_bench_gen")
        busy0, t0 = cpu_busy_ns(self.cpu), time.monotonic_ns()
        sent = 0
        with in_netns(self.ns):
            while time.monotonic_ns() - t0 < seconds * 1e9:
                prog.test_run(self.frame, ctx=self.ctx, repeat=LIVE_CHUNK,
                              flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=64)
                sent += LIVE_CHUNK
        return {"sent": sent, "errors": 0, "ns": time.monotonic_ns() - t0,
                "busy_ns": cpu_busy_ns(self.cpu) - busy0, "mode": "live_frames"}

    def measure(self) -> dict[str, Any]:
        """Run one phase of test runs."""
        return self._run(self.seconds)


@contextmanager
def open_sender(mode: str, ns: str, g0: int, frame: bytes, seconds: float, cpu: int,
                gen_obj: Path) -> Iterator[Sender]:
    """A warm sender of `mode` on interface `g0` of namespace `ns` (the caller's CPU
    affinity, one CPU, is inherited by cz_sender)."""
    if mode == "live_frames":
        live = LiveFramesSender(gen_obj, ns, g0, frame, seconds, cpu)
        try:
            yield live
        finally:
            live.obj.close()
        return
    with tempfile.TemporaryDirectory(prefix="czbench-") as tmp:
        frame_file = Path(tmp) / "frame"
        frame_file.write_bytes(frame)
        argv = ["ip", "netns", "exec", ns, str(SENDER), "--mode", mode, "--ifindex", str(g0),
                "--frame", str(frame_file), "--seconds", f"{seconds:g}"]
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        sender = CzSender(proc, f"cz_sender ({mode}) on {ns}/g0")
        try:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise sender.failed()
            yield sender
        finally:
            if proc.stdin:
                proc.stdin.close()  # the sender's loop ends at end of input
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for f in (proc.stdout, proc.stderr):
                if f:
                    f.close()
