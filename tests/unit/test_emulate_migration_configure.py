"""The migration driver sends a step's commands to every gateway at once (no emulator needed)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from crosszone_lab.emulate import topology
from crosszone_lab.emulate.migration import EmulatorDriver
from crosszone_lab.emulate.vty import VtyError

ROOT = Path(__file__).resolve().parents[2]


class FakeVty:
    def __init__(self, barrier: threading.Barrier | None, fail: bool = False) -> None:
        self.barrier, self.fail = barrier, fail
        self.runs: list[list[str]] = []
        self.closed = False

    def run(self, lines: list[str], check: bool = True) -> None:
        if self.barrier is not None:
            self.barrier.wait()  # every gateway's commands are in flight together
        if self.fail:
            raise VtyError("bgpd went away")
        self.runs.append(lines)

    def close(self) -> None:
        self.closed = True


def _driver() -> tuple[EmulatorDriver, list[Any]]:
    p = topology.plan(topology.load(ROOT / "examples" / "migrate.yaml"))
    dep: Any = type("Dep", (), {"plan": p})()
    return EmulatorDriver(dep), list(p.gateways)


def test_every_gateway_gets_its_commands_concurrently() -> None:
    d, gws = _driver()
    barrier = threading.Barrier(len(gws), timeout=10)
    fakes = {gw.ns: FakeVty(barrier) for gw in gws}
    d._vtys.update({(ns, "bgpd"): f for ns, f in fakes.items()})
    d.configure(gws, ["configure terminal", "end"])
    assert all(f.runs == [["configure terminal", "end"]] for f in fakes.values())


def test_a_broken_session_is_reopened_once_and_others_are_not_held_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    d, gws = _driver()
    broken = FakeVty(None, fail=True)
    fine = {gw.ns: FakeVty(None) for gw in gws[1:]}
    d._vtys[(gws[0].ns, "bgpd")] = broken
    d._vtys.update({(ns, "bgpd"): f for ns, f in fine.items()})
    again = FakeVty(None, fail=True)
    monkeypatch.setattr("crosszone_lab.emulate.migration.Vty", lambda ns, daemon="bgpd": again)
    with pytest.raises(VtyError):
        d.configure(gws, ["end"])
    assert broken.closed
    assert all(f.runs == [["end"]] for f in fine.values())


def test_realtime_block_runs_fifo_and_its_threads_too_then_restores() -> None:
    import os

    from crosszone_lab.emulate.migration import _realtime

    seen: dict[str, int] = {}

    def body() -> None:
        before = os.sched_getscheduler(0)
        with _realtime(1):
            seen["inside"] = os.sched_getscheduler(0)
            t = threading.Thread(target=lambda: seen.setdefault("thread",
                                                                os.sched_getscheduler(0)))
            t.start()
            t.join()
        seen["after"] = os.sched_getscheduler(0)
        seen["before"] = before

    runner = threading.Thread(target=body)  # a thread of its own: the test's stays as it is
    runner.start()
    runner.join()
    assert seen["after"] == seen["before"] == os.SCHED_OTHER
    if os.geteuid() == 0:
        assert seen["inside"] == seen["thread"] == os.SCHED_FIFO
    else:  # without the privilege the block still runs, at the usual priority
        assert seen["inside"] == os.SCHED_OTHER
