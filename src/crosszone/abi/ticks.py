"""The traffic policy's flow clock: the kernel's jiffies, and the rule that turns the intent's
durations into ticks (bpf/policy.h reads `bpf_jiffies64`, which the verifier inlines as one load;
`bpf_ktime_get_ns` costs 20-40 ns a call on the 2-core KVM machine this was measured on, more
than the policy's budget, see docs/fastpath.md "Cost").

A flow's idle time is measured as d = jiffies now - jiffies at its last packet. Jiffies step at
tick instants one tick (T) apart, so d = k means that k tick instants fell in the idle time t:
(k - 1) T < t < (k + 1) T. A duration D therefore becomes k = ceil(D / T) + 1 ticks: d >= k
implies t > (k - 1) T >= D (never before D: a flowlet move never comes before the gap, so it
cannot reorder more than the gap allows), and t >= k T implies d >= k (always by k T). With
HZ=250 (T = 4 ms) a 500 us gap is 2 ticks: a bulk flow moves after an idle time above 4 ms, and
surely after 8 ms; a 2 s idle time is 501 ticks (forgotten after 2 s to 2.004 s of silence).
"""

from __future__ import annotations

import functools
import time

CLOCK_MONOTONIC_COARSE = 6  # <linux/time.h>; Python's time module does not name it


@functools.cache
def kernel_tick_ns() -> int:
    """The length of one jiffy on this kernel (1e9 / HZ): the resolution of the coarse clock."""
    return round(time.clock_getres(CLOCK_MONOTONIC_COARSE) * 1e9)


def ticks_for(duration_ns: int, tick_ns: int) -> int:
    """The fewest jiffies whose passing proves that duration_ns has passed: ceil(D / T) + 1."""
    return -(-duration_ns // tick_ns) + 1


def ticks_at(now_ns: int, tick_ns: int) -> int:
    """Jiffies at now_ns for a clock whose ticks fall on multiples of tick_ns (tests and the
    reference model; the kernel's own jiffies have another origin, which no rule depends on)."""
    return now_ns // tick_ns
