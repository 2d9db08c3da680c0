"""The migration chart's sampler: a failed counter read is a missing sample, and the next one
spans the gap (no traceback from its thread, no end to the chart)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from crosszone.linux.netns import CommandFailed
from crosszone_lab.bench import migrate_chart


class Gw:
    def __init__(self, kind: str) -> None:
        self.kind = kind


def test_a_failed_read_is_skipped_and_the_next_sample_spans_the_gap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: Iterator[Any] = iter([100, CommandFailed("nft: killed by SIGINT"), 300, 400])
    clock = iter([10.0, 11.0, 12.0, 13.0])
    sampler: migrate_chart.Sampler

    def forwarded(_dep: Any, _gw: Any) -> int:
        value = next(reads, None)
        if value is None:
            sampler.halt.set()
            raise CommandFailed("no more")
        if isinstance(value, Exception):
            raise value
        return int(value)

    monkeypatch.setattr(migrate_chart, "forwarded_packets", forwarded)
    monkeypatch.setattr(migrate_chart.time, "time", lambda: next(clock))
    dep: Any = type("Dep", (), {"plan": type("Plan", (), {"gateways": [Gw("legacy")]})()})()
    sampler = migrate_chart.Sampler(dep, period_s=0.001)
    sampler.start()
    sampler.join(5)
    assert not sampler.is_alive()
    # 100 at t=10, failed read, 300 at t=11 (the gap spanned: 200/s), 400 at t=12 (100/s)
    assert [(r["t"], r["legacy"]) for r in sampler.rows] == [(11.0, 200.0), (12.0, 100.0)]
    assert sampler.missed == 2  # the SIGINT-killed read and the last one
