"""`bench forward` runs where the kernel refuses live-frames test runs (simulated with
`CROSSZONE_LIVE_FRAMES=refuse`, the probe's switch): every row and the summary, every frame
validated at the sink, none corrupted, misrouted or lost, and nothing left behind. Figures are
not asserted (benchmarks are not tests), only that each row measured something."""

from __future__ import annotations

import os
import subprocess

import pytest

from crosszone.fastpath import live_frames
from crosszone_lab.bench import forward

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="creates namespaces: needs root")


@pytest.fixture
def refused(monkeypatch):
    monkeypatch.setenv(live_frames.ENV_SWITCH, "refuse")
    live_frames.probe.cache_clear()
    yield
    live_frames.probe.cache_clear()


def test_bench_forward_needs_no_live_frames(refused):
    affinity = os.sched_getaffinity(0)
    lines: list[dict] = []
    try:
        rows = forward.run_bench(seconds=0.3, rounds=2, emit=lines.append)
    finally:
        os.sched_setaffinity(0, affinity)  # run_bench pins the calling process
    *per_kind, summary = lines
    assert [r["gateway"] for r in rows] == list(forward.KINDS) == [
        r["gateway"] for r in per_kind]
    for r in rows:
        assert r["pps"] > 0 and r["cpu_ns_per_pkt"] > 0 and r["rounds"] == 2
        assert r["corrupted"] == 0 and r["misrouted"] == 0 and r["lost"] == 0, r
    assert summary["summary"] is True and summary["sender"] == "af_xdp"
    assert len(summary["crosszone_over_legacy_rounds"]) == 2
    # every path and pin is gone
    netns = subprocess.run(["ip", "netns"], capture_output=True, text=True).stdout
    assert "czbench" not in netns
    assert not forward.PIN.exists()


def test_live_frames_sender_is_refused_in_one_error(refused):
    with pytest.raises(forward.EnvironmentProblem) as e:
        forward.check_sender("live_frames")
    assert "EPERM" in str(e.value)
    with pytest.raises(ValueError, match="unknown sender"):
        forward.check_sender("pktgen")
