"""Probe reports in the store: strict decoding, and what the runner's guards read from them
(failed reads between two readings even when rounds were missed, staleness, restarts)."""

from __future__ import annotations

import json

import pytest

from crosszone.probe.report import (
    ProbeReport,
    ProbeWatch,
    ReportError,
    Verdict,
    key,
    read_reports,
    write,
)
from probe_fakes import FakeStore


def _v(ok: bool, ms: float = 3.0) -> Verdict:
    return Verdict("storage-1", "10.20.0.11", 4, ok, ms, 120 if ok else 0,
                   "" if ok else "10.20.0.11: connect: TimeoutError('timed out')", 1000.0)


def _report(name: str = "canary-h1", role: str = "canary", t: float = 1000.0,
            rounds: int = 1, reads: int = 2, failed: int = 0, verdicts: tuple = (),
            started: float = 900.0, stopped: bool = False) -> ProbeReport:
    return ProbeReport(probe=name, role=role, updated=t, started=started, interval_s=1.0,
                       rounds=rounds, reads=reads, errors=failed, p99_ms=3.0,
                       verdicts=verdicts or (_v(True), _v(True)), stopped=stopped)


def test_a_report_survives_the_store() -> None:
    r = _report(verdicts=(_v(True, 2.5), _v(False, 1000.0)), failed=1)
    s = FakeStore()
    write(s, r)
    assert ProbeReport.from_json(s.items[key("canary-h1")]) == r
    assert read_reports(s) == ({"canary-h1": r}, [])


def _doc(**change: object) -> bytes:
    d = json.loads(_report().to_json())
    for k, v in change.items():
        if k.startswith("v_"):
            d["verdicts"][0][k[2:]] = v
        elif v is ...:
            del d[k]
        else:
            d[k] = v
    return json.dumps(d).encode()


@pytest.mark.parametrize(("raw", "words"), [
    (b"{", "not JSON"),
    (b"[]", "not a JSON object"),
    (b"\xff", "not JSON"),
    (_doc(role="staging"), "role 'staging'"),
    (_doc(reads=-1), "reads -1"),
    (_doc(errors=5), "errors 5 > reads 2"),
    (_doc(p99_ms=-1), "p99_ms -1.0 is negative"),
    (_doc(reads="2"), "reads is '2', not int"),
    (_doc(reads=True), "reads is True, not int"),
    (_doc(updated=None), "updated is None, not float"),
    (_doc(interval_s=0), "interval_s 0.0"),
    (_doc(rounds=...), "missing rounds"),
    (_doc(extra=1), "unknown extra"),
    (_doc(verdicts={}), "verdicts is {}"),
    (_doc(v_ok=1), "verdicts[0]: ok is 1, not bool"),
    (_doc(v_ms="3"), "verdicts[0]: ms is '3'"),
    (_doc(v_colour="red"), "verdicts[0]: unknown colour"),
    (b'{"reads": ' + b"[" * 100000 + b"]" * 100000 + b"}", "not"),
])
def test_a_stored_value_that_is_not_a_report_is_named(raw: bytes, words: str) -> None:
    with pytest.raises(ReportError) as err:
        ProbeReport.from_json(raw, "probe/x")
    assert str(err.value).startswith("probe/x") and words in str(err.value), str(err.value)


def test_read_reports_names_bad_values_and_misfiled_reports() -> None:
    s = FakeStore()
    s.items["probe/bad"] = b"nope"
    s.items["probe/other"] = _report("canary-h1").to_json()
    write(s, _report("prod-h2", "production"))
    reports, problems = read_reports(s)
    assert set(reports) == {"prod-h2"}
    assert len(problems) == 2 and "probe/bad: not JSON" in problems[0]
    assert "holds the report of probe 'canary-h1'" in problems[1]


def test_failures_between_readings_count_even_when_rounds_were_missed() -> None:
    s = FakeStore()
    w = ProbeWatch(s)
    write(s, _report(rounds=1, reads=2, failed=0))
    first = w.read("canary", now=1000.5)
    assert (first.reads, first.failed, first.probes, first.stale) == (2, 0, ("canary-h1",), ())
    # three rounds later, one failure two rounds ago; the newest round is clean
    write(s, _report(t=1003.0, rounds=4, reads=8, failed=1))
    second = w.read("canary", now=1003.2)
    assert (second.reads, second.failed) == (6, 1)
    assert second.p99_ms == 3.0
    again = w.read("canary", now=1003.4)  # nothing new
    assert (again.reads, again.failed, again.messages) == (0, 0, ())


def test_a_restarted_probe_counts_its_newest_round_only() -> None:
    s = FakeStore()
    w = ProbeWatch(s)
    write(s, _report(rounds=50, reads=100, failed=3))
    w.read("canary", now=1000.0)
    write(s, _report(started=1001.0, t=1002.0, rounds=1, reads=2, failed=1,
                     verdicts=(_v(True), _v(False))))
    r = w.read("canary", now=1002.0)
    assert (r.reads, r.failed) == (2, 1)
    assert r.messages == ("canary-h1: 10.20.0.11: connect: TimeoutError('timed out')",)


def test_a_silent_or_stopped_probe_is_stale_and_roles_are_apart() -> None:
    s = FakeStore()
    w = ProbeWatch(s)
    write(s, _report("canary-h1", t=1000.0))
    write(s, _report("prod-h2", "production", t=1000.0, stopped=True))
    c = w.read("canary", now=1002.9)
    assert c.stale == () and c.probes == ("canary-h1",)
    assert w.read("canary", now=1003.1).stale == ("canary-h1",)
    p = w.read("production", now=1000.0)
    assert p.stale == ("prod-h2",) and p.probes == ("prod-h2",)
    with pytest.raises(ValueError, match="role 'both'"):
        w.read("both", now=0.0)


def test_the_migration_drivers_reader_reads_what_a_probe_writes() -> None:
    """migrate/probe_verdicts.py (the runner's guards) reads role, updated, reads, errors and
    p99_ms of the same objects: failures between two of its readings, and the p99."""
    from crosszone.migrate.probe_verdicts import StoreProbes

    s = FakeStore()
    probes = StoreProbes(s, wall=lambda: 1000.5)
    write(s, _report(rounds=1, reads=2, failed=0))
    assert probes.read("canary") is not None
    write(s, _report(t=1003.0, rounds=4, reads=8, failed=1))
    got = probes.read("canary")
    assert got is not None and (got.reads, got.errors, got.p99_ms) == (6, 1, 3.0)
    assert probes.read("production") is None
