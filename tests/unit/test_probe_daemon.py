"""The probe daemon: rounds on its schedule with injected time, reports in a fake store, a
store outage that loses no failure, and a clean stop (SIGTERM to the real command)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crosszone.probe.config import loads
from crosszone.probe.daemon import ProbeDaemon
from crosszone.probe.report import ProbeReport, ProbeWatch, key
from crosszone.store.sqlite_store import SqliteStore
from probe_fakes import FakeHttp, FakeStore

DOC = b'{"shard": 0}\n' * 10
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def http() -> Iterator[FakeHttp]:
    s = FakeHttp({"/meta/doc.json": DOC})
    yield s
    s.close()


def _config(port: int, interval: float = 1.0, role: str = "canary") -> str:
    return (f"name: canary-h1\nrole: {role}\ninterval_s: {interval}\ntargets:\n"
            f"  - name: storage-1\n    addresses: [127.0.0.1]\n    port: {port}\n"
            f"    path: /meta/doc.json\n    size: {len(DOC)}\n"
            f"    sha256: {hashlib.sha256(DOC).hexdigest()}\n")


class Clock:
    """Wall and monotonic time that move only when the daemon waits."""

    def __init__(self) -> None:
        self.now = 5000.0
        self.waits: list[float] = []

    def wait(self, seconds: float) -> bool:
        self.waits.append(round(seconds, 6))
        self.now += seconds
        return False


def test_rounds_report_their_verdicts_on_schedule(http: FakeHttp) -> None:
    store, clock = FakeStore(), Clock()
    d = ProbeDaemon(loads(_config(http.port)), store, wall=lambda: clock.now,
                    mono=lambda: clock.now, wait=clock.wait)
    assert d.run(max_rounds=3) == 3
    assert clock.waits == [1.0, 1.0]  # reads take (real) milliseconds, the clock none
    r = ProbeReport.from_json(store.items[key("canary-h1")])
    assert (r.rounds, r.reads, r.errors, r.stopped, r.started) == (3, 3, 0, True, 5000.0)
    assert r.p99_ms == r.verdicts[0].ms
    (v,) = r.verdicts
    assert (v.target, v.address, v.family, v.ok, v.bytes, v.error) == (
        "storage-1", "127.0.0.1", 4, True, len(DOC), "")
    # one report per round, and the last one says the daemon stopped
    assert len(store.writes) == 4


def test_a_round_that_overran_is_followed_at_once_not_by_a_burst(http: FakeHttp) -> None:
    store, clock = FakeStore(), Clock()

    def slow_round(targets, connect_s, response_s, parallel):  # type: ignore[no-untyped-def]
        clock.now += 2.5  # a round that took 2.5 intervals
        return []

    d = ProbeDaemon(loads(_config(http.port)), store, wall=lambda: clock.now,
                    mono=lambda: clock.now, wait=clock.wait, read_round=slow_round)
    d.run(max_rounds=3)
    assert clock.waits == [0.0, 0.0]


def test_failures_while_the_store_is_down_are_reported_when_it_is_back(
        http: FakeHttp) -> None:
    store, clock, log = FakeStore(), Clock(), []
    d = ProbeDaemon(loads(_config(http.port)), store, wall=lambda: clock.now,
                    mono=lambda: clock.now, wait=clock.wait, log=log.append)
    watch = ProbeWatch(store)
    d.round()
    assert watch.read("canary", clock.now).failed == 0
    store.down = True
    http.mode = "flip"
    d.round()
    d.round()
    store.down = False
    http.mode = "ok"
    d.round()
    seen = watch.read("canary", clock.now)
    assert (seen.reads, seen.failed) == (3, 2)
    assert [m[:12] for m in log] == ["read failed ", "cannot write", "read failed ",
                                     "the store an"]


def test_a_stop_ends_the_wait_and_writes_a_last_report(http: FakeHttp) -> None:
    store = FakeStore()
    d = ProbeDaemon(loads(_config(http.port, interval=30.0)), store)
    d.stop.set()
    assert d.run() == 0
    assert ProbeReport.from_json(store.items[key("canary-h1")]).stopped


def test_sigterm_stops_the_command_cleanly(tmp_path: Path, http: FakeHttp) -> None:
    cfg = tmp_path / "probe.yaml"
    cfg.write_text(_config(http.port, interval=0.2))
    db = tmp_path / "s.db"
    env = {**os.environ, "CROSSZONE_STORE": f"sqlite://{db}"}
    proc = subprocess.Popen([sys.executable, "-m", "crosszone.cli", "probe", "--config",
                             str(cfg)], env=env, cwd=ROOT, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while len(http.requests) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(http.requests) >= 3, "the probe did not read"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode()
    st = SqliteStore(str(db))
    try:
        r = ProbeReport.from_json(st.get(key("canary-h1")) or b"")
    finally:
        st.close()
    assert r.stopped and r.errors == 0 and r.reads >= 3


def test_once_prints_the_report_and_fails_on_a_failed_read(tmp_path: Path,
                                                           http: FakeHttp) -> None:
    cfg = tmp_path / "probe.yaml"
    cfg.write_text(_config(http.port))
    env = {**os.environ, "CROSSZONE_STORE": f"sqlite://{tmp_path / 's.db'}"}
    cmd = [sys.executable, "-m", "crosszone.cli", "probe", "--config", str(cfg), "--once"]
    ok = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, timeout=60)
    assert ok.returncode == 0, ok.stderr.decode()
    assert json.loads(ok.stdout)["verdicts"][0]["ok"] is True
    http.mode = "flip"
    bad = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, timeout=60)
    assert bad.returncode == 1
    assert "body differs" in json.loads(bad.stdout)["verdicts"][0]["error"]


def test_a_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    cfg = tmp_path / "probe.yaml"
    cfg.write_text("name: x\nrole: canary\ntargets: []\n")
    out = subprocess.run([sys.executable, "-m", "crosszone.cli", "probe", "--config", str(cfg),
                          "--store", f"sqlite://{tmp_path / 's.db'}"], cwd=ROOT,
                         capture_output=True, timeout=60)
    assert out.returncode == 2 and b"targets" in out.stderr
