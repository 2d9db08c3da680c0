"""The flow clock's rule (abi/ticks.py): a duration D becomes k = ceil(D / T) + 1 jiffies, so
that k jiffies passing prove more than D of silence, and a silence of k ticks always shows as k.
Checked against a clock whose ticks fall at any phase, by exhaustive small cases and hypothesis."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crosszone.abi.ticks import kernel_tick_ns, ticks_at, ticks_for


def _jiffies(t: int, tick: int, phase: int) -> int:
    """Jiffies at time t of a clock that ticks at phase + n * tick."""
    return ticks_at(t - phase, tick)


@given(tick=st.integers(1, 10_000), duration=st.integers(0, 100_000), phase=st.integers(0, 9_999),
       start=st.integers(0, 1_000_000), idle=st.integers(0, 200_000))
def test_k_jiffies_prove_the_duration_and_k_ticks_always_show(tick, duration, phase, start, idle):
    k = ticks_for(duration, tick)
    d = _jiffies(start + idle, tick, phase % tick) - _jiffies(start, tick, phase % tick)
    if d >= k:
        assert idle > duration  # a move or an aging never comes before the intent's duration
    if idle >= k * tick:
        assert d >= k  # and always comes within k ticks
    assert (k - 1) * tick >= duration > (k - 2) * tick  # the fewest ticks that prove it


def test_the_shortest_proof_is_tight():
    """One jiffy fewer would not prove it: a silence of (k - 1) jiffies can be shorter than D."""
    tick = 4_000_000
    for duration in (1, 500_000, 3_999_999, 4_000_000, 4_000_001, 2_000_000_000):
        k = ticks_for(duration, tick)
        shortest_with_k_minus_1 = (k - 2) * tick + 1  # from the last ns of a tick
        assert shortest_with_k_minus_1 <= duration


def test_the_kernel_tick_is_a_jiffy():
    tick = kernel_tick_ns()
    assert 1_000_000 <= tick <= 10_000_000  # HZ between 100 and 1000
    assert 1_000_000_000 % tick == 0
