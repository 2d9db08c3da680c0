"""`crosszone bench migrate` end to end: legacy -> crosszone and back under the training workload
on every production endpoint and the UDP probe (root; builds examples/migrate.yaml itself).

What it asserts is what the issue asks of a migration under a live job: both migrations reach
`finished` (canary, every step, drain, retire), at most one or 0.1 % of the workload's requests
failed (measured: 0 or 1 of about 9,500 per run), no TCP connection was reset, and the probe lost at
most 0.2 % of its datagrams (measured: none in the runs recorded in docs/migrate.md); one line
per step with the fields the runbook documents."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from crosszone.linux import netns
from crosszone_lab.bench.migrate import run_bench
from crosszone_lab.emulate import deploy

MAX_LOSS_SHARE = 0.002
MAX_FAILED_SHARE = 0.001
FIELDS = {"migration", "step", "weight_new", "lost", "lost_to_storage", "lost_to_compute",
          "max_gap_ms", "failed_requests", "converge_ms", "kernel_converge_ms", "driver",
          "applied_ms", "share", "share_unit", "announce_ms", "update_rcvd_ms", "written_ms",
          "after_update_ms"}


def test_both_migrations_under_the_workload_lose_nothing(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("integration tests need root")
    lines: list[str] = []
    chart = tmp_path / "migrate.png"
    try:
        # loose latency guards, as in test_migrate.py: on a fresh CI box at load 19 the guard
        # reads' p99 alone breached a factor of 10 once (1.9 s) and rolled the run back with
        # nothing lost; what this test holds to is loss, failed requests and resets
        summary = run_bench((10, 50, 100), 2.0, 2000.0, 16, emit=lines.append, chart=chart,
                            latency_factor=1000.0)
    finally:
        deploy.down(netns.Executor(), log=lambda _m: None)
    docs = [json.loads(x) for x in lines]
    assert docs[-1] == summary and summary["summary"] is True
    assert summary["migrations"] == ["legacy->crosszone: finished",
                                     "crosszone->legacy: finished"], json.dumps(summary)[-3000:]
    steps = docs[:-1]
    assert [(d["migration"], d["weight_new"]) for d in steps] == [
        ("legacy->crosszone", 10), ("legacy->crosszone", 50), ("legacy->crosszone", 100),
        ("crosszone->legacy", 10), ("crosszone->legacy", 50), ("crosszone->legacy", 100)]
    assert all(set(d) == FIELDS for d in steps), [sorted(set(d) ^ FIELDS) for d in steps]
    # both convergence figures on every line: the driver's own and the routers' kernels'
    assert all(d["kernel_converge_ms"] is not None and d["driver"] == "agents"
               for d in steps), steps
    # the emulator's legacy gateways count bytes too: the share is read in bytes
    assert all(d["share_unit"] == "bytes" for d in steps if d["share"] is not None), steps
    assert all(d["converge_ms"] is not None and d["converge_ms"] > 0 for d in steps)
    # every step changed some route at the routers, before both kernels held its weights
    assert all(d["update_rcvd_ms"] is not None and 0 < d["update_rcvd_ms"] <= d["converge_ms"]
               for d in steps), steps
    # ... and the routers' zebra logged writing the step's routes to the kernel meanwhile
    assert all(d["written_ms"] is not None for d in steps), steps
    # the target is 0; one checkpoint PUT in four recorded runs timed out (10 s) at a saturated
    # 100 Mbit/s storage port with the probe losing nothing (docs/migrate.md): bounded here
    requests = sum(summary["workload"][k]["requests"] for k in ("loader", "checkpoint", "small"))
    # the workload ran (a clean CI machine at load average 27 to 31 completed 826 requests in
    # the run; about 9,500 on this box's quieter runs)
    assert requests > 200, summary["workload"]
    assert summary["failed_requests"] <= max(1.0, MAX_FAILED_SHARE * requests), summary["workload"]
    assert summary["tcp_resets"] == 0
    sent = summary["probe"]["sent"]
    assert sent > 100_000
    assert summary["lost"] <= MAX_LOSS_SHARE * sent, (summary["lost"], summary["lost_by_second"])
    assert summary["lost"] == summary["lost_to_storage"] + summary["lost_to_compute"]
    assert chart.stat().st_size > 10_000
