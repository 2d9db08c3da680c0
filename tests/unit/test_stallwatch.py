"""The CPU-stall sentinel that tells an emulation's own BFD flaps from a frozen CPU."""

from __future__ import annotations

import os
import time

import pytest

from crosszone_lab.emulate.stallwatch import Stall, StallWatch, parse


def test_parse_reads_one_stall_per_line_and_skips_garbage() -> None:
    got = parse(1, "1700000000000000000 151.25 0.0\nnot a line\n1700000000500000000 40 12\n")
    assert got == [Stall(1, 1_700_000_000_000_000_000, 151.25, 0.0),
                   Stall(1, 1_700_000_000_500_000_000, 40.0, 12.0)]
    assert got[0].start_ns == 1_700_000_000_000_000_000 - 151_250_000


def test_explaining_takes_the_largest_stall_near_the_event_on_the_given_cpus() -> None:
    w = StallWatch()
    t = 10_000_000_000
    w.stalls = [Stall(0, t - 300_000_000, 130.0, 0.0), Stall(1, t - 100_000_000, 400.0, 0.0),
                Stall(0, t - 50_000_000, 90.0, 0.0), Stall(0, t - 3_000_000_000, 900.0, 0.0)]
    assert w.explaining(t, 120.0) == w.stalls[1]
    assert w.explaining(t, 120.0, cpus={0}) == w.stalls[0]
    assert w.explaining(t, 200.0, cpus={0}) is None  # the 900 ms one ended 3 s before
    assert w.explaining(t - 400_000_000, 120.0, cpus={0}, after_s=0.05) is None
    assert w.worst_ms() == 900.0


@pytest.mark.skipif(os.geteuid() != 0, reason="real-time priority needs root")
def test_a_real_time_hog_on_one_cpu_is_recorded_as_a_stall_of_that_cpu() -> None:
    cpu = sorted(os.sched_getaffinity(0))[-1]
    with StallWatch(threshold_ms=20) as w:
        time.sleep(0.5)  # the sentinels are up
        r, wr = os.pipe()
        t_fork = time.time_ns()
        pid = os.fork()
        if pid == 0:  # a SCHED_FIFO thread above the sentinel spins for 250 ms on `cpu`
            try:
                os.close(r)
                os.sched_setaffinity(0, {cpu})
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(90))
                t_spin = time.time_ns()  # the sentinel on `cpu` last ran before this
                end = time.monotonic() + 0.25
                while time.monotonic() < end:
                    pass
                os.write(wr, str(t_spin).encode())
            finally:
                os._exit(0)
        # The parent's own clock reading after fork may wait behind the hog (it may share `cpu`
        # on a busy box), so the hog's start is what the child itself read once it ran.
        os.close(wr)
        os.waitpid(pid, 0)
        t_spin = int(os.read(r, 64) or b"0")
        os.close(r)
        time.sleep(0.1)
    assert t_spin >= t_fork, "the hog did not report when it started spinning"
    hits = [s for s in w.stalls if s.cpu == cpu and s.gap_ms >= 200]
    assert hits, w.stalls
    assert t_fork - 100_000_000 <= hits[0].start_ns <= t_spin + 20_000_000, (t_fork, t_spin, hits)
    assert w.explaining(hits[0].end_ns, 200, cpus={cpu}) == hits[0]
