"""The probe daemon: a round of byte-exact reads every interval, each round reported to the store.

One runs on a host in the canary VPC and one (or more) in production VPCs; the migration
runner's guards read their reports (`report.ProbeWatch`). Rounds start on a fixed schedule
(`interval_s` apart, on the monotonic clock): a round that overran its interval is followed at
once by the next, never by a burst of the ones it missed.

A store that cannot be reached does not stop the daemon: the round's verdicts are counted all
the same and the next write carries the counters, so no failed read is lost, only late (the
guards see the report go stale meanwhile). Each failure to write is logged once per outage.

Stopping (SIGTERM, `stop.set()`): the round under way finishes (its reads are bounded by their
deadlines), then one last report with `stopped: true` tells the guards the probe went away on
purpose, and `run` returns. Time is injected (`wall`, `mono`, `wait`) so the unit tests run a
daemon's rounds without sleeping.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from crosszone.probe import http_read
from crosszone.probe.config import ProbeConfig
from crosszone.probe.report import ProbeReport, Verdict, write
from crosszone.store.store import Store, StoreUnavailable

ReadRound = Callable[[Sequence[http_read.Target], float, float, int], list[http_read.Outcome]]


def _read_round(targets: Sequence[http_read.Target], connect_s: float, response_s: float,
                parallel: int) -> list[http_read.Outcome]:
    return http_read.run_round(targets, connect_s, response_s, parallel)


@dataclass
class ProbeDaemon:
    """Runs `config`'s rounds and writes their reports to `store`."""

    config: ProbeConfig
    store: Store
    wall: Callable[[], float] = time.time
    mono: Callable[[], float] = time.monotonic
    #: waits up to its argument (seconds) unless stopped; True when stopped
    wait: Callable[[float], bool] | None = None
    log: Callable[[str], None] = lambda _m: None
    read_round: ReadRound = _read_round
    stop: threading.Event = field(default_factory=threading.Event)
    started: float = 0.0
    rounds: int = 0
    reads: int = 0
    errors: int = 0
    last: tuple[Verdict, ...] = ()
    last_report: ProbeReport | None = None
    _store_down: bool = False

    def round(self) -> ProbeReport:
        """One round of reads; the report it made (written when the store answers)."""
        c = self.config
        outcomes = self.read_round(c.targets, c.connect_s, c.response_s, c.parallel)
        now = self.wall()
        self.last = tuple(
            Verdict(target=o.target.name or o.target.server, address=o.target.server,
                    family=o.target.family, ok=o.ok, ms=round(o.ms, 3), bytes=o.nbytes,
                    error=o.error, t=now)
            for o in outcomes)
        self.rounds += 1
        self.reads += len(outcomes)
        self.errors += sum(not o.ok for o in outcomes)
        for v in self.last:
            if not v.ok:
                self.log(f"read failed after {v.ms:.0f} ms: {v.target} {v.error}")
        return self._report(stopped=False)

    def _report(self, stopped: bool) -> ProbeReport:
        c = self.config
        report = ProbeReport(probe=c.name, role=c.role, updated=self.wall(),
                             started=self.started, interval_s=c.interval_s, rounds=self.rounds,
                             reads=self.reads, errors=self.errors,
                             p99_ms=round(http_read.p99_ms([v.ms for v in self.last if v.ok]), 3),
                             verdicts=self.last, stopped=stopped)
        self.last_report = report
        try:
            write(self.store, report)
        except (StoreUnavailable, OSError) as exc:
            if not self._store_down:
                self.log(f"cannot write the report to the store (counting on): {exc}")
            self._store_down = True
        else:
            if self._store_down:
                self.log("the store answers again")
            self._store_down = False
        return report

    def run(self, max_rounds: int | None = None) -> int:
        """Rounds until stopped (or `max_rounds` done); return the rounds run."""
        wait = self.wait or self.stop.wait
        self.started = self.wall()
        next_at = self.mono()
        done = 0
        while not self.stop.is_set() and (max_rounds is None or done < max_rounds):
            self.round()
            done += 1
            next_at += self.config.interval_s
            now = self.mono()
            if next_at < now:  # the round overran: the next starts now, the missed are skipped
                next_at = now
            if max_rounds is not None and done >= max_rounds:
                break
            if wait(next_at - now):
                break
        self._report(stopped=True)
        return done
