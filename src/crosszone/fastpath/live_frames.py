"""Does this kernel run XDP test runs in live-frames mode? One probe per process.

BPF_F_TEST_XDP_LIVE_FRAMES (Linux 5.18+) makes BPF_PROG_TEST_RUN hand each iteration to the
program as a driver would, and really transmit what it returns XDP_TX or XDP_REDIRECT. Kernels
before 5.18 refuse the flag (EINVAL), and a security policy may refuse it anywhere: hosts with a
BPF LSM answer EPERM while plain test runs and XDP on real devices work. So nothing the project
needs may depend on it; the benchmarks that can use it ask `probe()` first and report the
kernel's answer when refused.

The probe runs a program that returns XDP_PASS once, in live-frames mode, on the loopback
device of the calling thread's network namespace (every namespace has lo at ifindex 1).

`CROSSZONE_LIVE_FRAMES=refuse` makes the probe report the refusal a hardened host gives (EPERM)
without asking the kernel, so that both paths run on any machine (the tests use it).
"""

from __future__ import annotations

import errno
import functools
import os
from dataclasses import dataclass

from crosszone.abi.objects import object_path

#: Environment switch: "refuse" makes the probe answer EPERM as a hardened kernel does.
ENV_SWITCH = "CROSSZONE_LIVE_FRAMES"
PROBE_OBJECT = "xdp_pass"
PROBE_PROGRAM = "cz_pass"
LOOPBACK_IFINDEX = 1


@dataclass(frozen=True)
class LiveFrames:
    """The probe's answer: allowed, or the errno the kernel gave and what it means."""

    allowed: bool
    errno: int | None = None
    reason: str = ""

    def unavailable(self) -> str:
        """One line for a report: the errno's name and what it means here."""
        if self.allowed or self.errno is None:
            return ""
        return f"{errno.errorcode.get(self.errno, self.errno)}: {self.reason}"


def _meaning(err: int) -> str:
    if err == errno.EPERM:
        return ("the kernel refused BPF_F_TEST_XDP_LIVE_FRAMES test runs (a security policy, "
                "such as a BPF LSM, denies them); plain test runs and attached XDP still work")
    if err == errno.EINVAL:
        return ("the kernel does not know BPF_F_TEST_XDP_LIVE_FRAMES (it needs Linux 5.18 or "
                "later)")
    return f"bpf_prog_test_run_opts in live-frames mode failed: {os.strerror(err)}"


def simulated_refusal() -> bool:
    """Whether the environment switch asks for a refusal."""
    return os.environ.get(ENV_SWITCH, "").strip().lower() == "refuse"


def _ask_kernel() -> LiveFrames:
    from crosszone.fastpath.libbpf import (
        BPF_F_TEST_XDP_LIVE_FRAMES,
        BpfError,
        BpfObject,
        xdp_ctx,
    )

    path = object_path(PROBE_OBJECT)
    if not path.exists():
        raise FileNotFoundError(f"{path}: the live-frames probe's program (run `make build`)")
    with BpfObject.open(path) as obj:
        frame = bytes(12) + b"\x08\x00" + bytes(46)
        try:
            obj.program(PROBE_PROGRAM).test_run(frame, ctx=xdp_ctx(LOOPBACK_IFINDEX), repeat=1,
                                                flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=1)
        except BpfError as exc:
            err = exc.errno or errno.EIO
            return LiveFrames(False, err, _meaning(err))
    return LiveFrames(True)


@functools.cache
def probe() -> LiveFrames:
    """Ask once per process (cached): may XDP test runs use live frames here?"""
    if simulated_refusal():
        return LiveFrames(False, errno.EPERM,
                          _meaning(errno.EPERM) + f" (simulated by {ENV_SWITCH}=refuse)")
    return _ask_kernel()
