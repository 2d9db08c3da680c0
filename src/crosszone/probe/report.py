"""What a probe reports to the store, and how the migration runner's guards read it.

Each daemon writes one key, `probe/<name>`, after every round: a `ProbeReport` as JSON. It holds
the round's verdicts (one per read: target, address, family, ok, latency, bytes, error, time),
the p99 latency of the round's good reads (`p99_ms`), when it was written (`updated`, epoch
seconds) and counters since the daemon started at `started` (`reads`, `errors`: failed reads,
`rounds`). Only `role`, `updated`, `reads`, `errors` and `p99_ms` are needed to guard a
migration (the migration driver's reader, migrate/probe_verdicts.py, reads just those); the
verdicts say what failed.

The guards need the counters because the runner and the probe tick on clocks of their own: a
runner that reads every second from a probe that reports every half second would otherwise miss
every other round, and a failed read in it. `ProbeWatch` turns the counters into what happened
between two of the runner's readings; latency comes from the newest round's verdicts.

The store is writable by anyone who may write intent, so a report is decoded strictly
(`ProbeReport.from_json`): a value that is not a well-formed report is named, never guessed at,
and never counts as a good reading. A probe that has not reported for `stale_after` intervals
(it died, or its host lost the store) is `stale`: the guard must count that as a failure of
its own, since a silent probe proves nothing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from crosszone.probe.http_read import p99_ms
from crosszone.store.store import Store

PREFIX = "probe/"
#: A report older than this many of its probe's intervals is stale.
STALE_INTERVALS = 3.0
ROLES = ("canary", "production")
_VERDICT = {"target": str, "address": str, "family": int, "ok": bool, "ms": float,
            "bytes": int, "error": str, "t": float}
_REPORT = {"probe": str, "role": str, "updated": float, "started": float, "interval_s": float,
           "rounds": int, "reads": int, "errors": int, "p99_ms": float, "stopped": bool,
           "verdicts": list}


class ReportError(ValueError):
    """A stored value that is not a probe report (the message names the key and field)."""


@dataclass(frozen=True)
class Verdict:
    """One read: `ok` when the body was the expected document; `ms` from connect to the last
    byte; `bytes` the body bytes received; `t` the wall-clock time (epoch seconds) it ended."""

    target: str
    address: str
    family: int
    ok: bool
    ms: float
    bytes: int
    error: str
    t: float


@dataclass(frozen=True)
class ProbeReport:
    """A probe's latest round (`verdicts`, `p99_ms` of its good reads) and its counters since
    `started` (epoch seconds); `errors` counts failed reads. `stopped` marks the last report of
    a daemon that was told to stop."""

    probe: str
    role: str
    updated: float
    started: float
    interval_s: float
    rounds: int
    reads: int
    errors: int
    p99_ms: float = 0.0
    verdicts: tuple[Verdict, ...] = ()
    stopped: bool = False

    def to_json(self) -> bytes:
        """The stored value."""
        d = asdict(self)
        d["verdicts"] = [asdict(v) for v in self.verdicts]
        return json.dumps(d, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, key: str = "?") -> ProbeReport:
        """Decode a stored value strictly (ReportError naming `key` and the field)."""
        try:
            d = json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ReportError(f"{key}: not JSON ({type(exc).__name__})") from None
        fields = _fields(d, _REPORT, key)
        if fields["role"] not in ROLES:
            raise ReportError(f"{key}: role {fields['role']!r} is not one of "
                              f"{', '.join(ROLES)}")
        for name in ("rounds", "reads", "errors", "p99_ms"):
            if fields[name] < 0:
                raise ReportError(f"{key}: {name} {fields[name]} is negative")
        if fields["errors"] > fields["reads"]:
            raise ReportError(f"{key}: errors {fields['errors']} > reads {fields['reads']}")
        if fields["interval_s"] <= 0:
            raise ReportError(f"{key}: interval_s {fields['interval_s']} is not positive")
        verdicts = tuple(Verdict(**_fields(v, _VERDICT, f"{key}: verdicts[{i}]"))
                         for i, v in enumerate(fields.pop("verdicts")))
        return cls(verdicts=verdicts, **fields)

    @property
    def latencies(self) -> list[float]:
        """Latencies (ms) of the round's good reads."""
        return [v.ms for v in self.verdicts if v.ok]


def _fields(d: object, spec: Mapping[str, type], where: str) -> dict[str, Any]:
    """The fields of `spec` from the JSON object `d`, each of its type (an int is a float too;
    a bool is never a number); extra or missing fields are errors."""
    if not isinstance(d, dict):
        raise ReportError(f"{where}: not a JSON object")
    missing = sorted(set(spec) - set(d))
    extra = sorted(set(d) - set(spec))
    if missing or extra:
        raise ReportError(f"{where}: " + "; ".join(
            ([f"missing {', '.join(missing)}"] if missing else [])
            + ([f"unknown {', '.join(extra)}"] if extra else [])))
    out: dict[str, Any] = {}
    for name, typ in spec.items():
        v = d[name]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)) or (
                isinstance(v, float) and not math.isfinite(v)):
            raise ReportError(f"{where}: {name} is {v!r}, not {typ.__name__}")
        out[name] = v
    return out


def key(probe: str) -> str:
    """The store key of a probe's reports."""
    return PREFIX + probe


def write(store: Store, report: ProbeReport) -> int:
    """Store a report; return the store revision."""
    return store.put(key(report.probe), report.to_json())


def read_reports(store: Store) -> tuple[dict[str, ProbeReport], list[str]]:
    """Every stored report by probe name, and why any stored value is not one."""
    items, _revision = store.get_prefix(PREFIX)
    reports: dict[str, ProbeReport] = {}
    problems: list[str] = []
    for k, raw in sorted(items.items()):
        try:
            r = ProbeReport.from_json(raw, k)
        except ReportError as exc:
            problems.append(str(exc))
            continue
        if key(r.probe) != k:
            problems.append(f"{k}: holds the report of probe {r.probe!r}")
            continue
        reports[r.probe] = r
    return reports, problems


@dataclass(frozen=True)
class RoleReading:
    """What the probes of one role saw between two readings of a `ProbeWatch`.

    `reads`/`failed`: reads done and failed since the previous reading (a probe seen for the
    first time, or restarted, counts its newest round); `p99_ms` over the good reads of every
    probe's newest round; `probes` the probes that reported; `stale` the probes whose newest
    report is older than `STALE_INTERVALS` of their interval, or that said they stopped;
    `messages` why the new failed reads of the newest rounds failed; `problems` stored values
    that are not reports."""

    role: str
    probes: tuple[str, ...]
    reads: int
    failed: int
    p99_ms: float
    stale: tuple[str, ...]
    messages: tuple[str, ...]
    problems: tuple[str, ...] = ()


@dataclass
class ProbeWatch:
    """Reads the probes' reports for the runner's guards, one reading per tick."""

    store: Store
    _last: dict[str, tuple[float | None, int, int]] = field(default_factory=dict)

    def read(self, role: str, now: float) -> RoleReading:
        """The probes of `role` since the previous reading; `now` is the wall-clock time
        (epoch seconds) the staleness is judged at."""
        if role not in ROLES:
            raise ValueError(f"role {role!r}: one of {', '.join(ROLES)}")
        reports, problems = read_reports(self.store)
        probes, stale, messages, latencies = [], [], [], []
        reads = failed = 0
        for name, r in sorted(reports.items()):
            if r.role != role:
                continue
            probes.append(name)
            if r.stopped or now - r.updated > STALE_INTERVALS * r.interval_s:
                stale.append(name)
            started, reads0, failed0 = self._last.get(name, (None, 0, 0))
            if started != r.started or r.reads < reads0 or r.errors < failed0:
                # first sight or a restarted daemon: only its newest round is known to be new
                reads0 = r.reads - len(r.verdicts)
                failed0 = r.errors - sum(not v.ok for v in r.verdicts)
            reads += r.reads - reads0
            failed += r.errors - failed0
            if (r.reads, r.errors) != (reads0, failed0):
                messages += [f"{name}: {v.error}" for v in r.verdicts if not v.ok]
            latencies += r.latencies
            self._last[name] = (r.started, r.reads, r.errors)
        return RoleReading(role, tuple(probes), reads, failed, round(p99_ms(latencies), 3),
                           tuple(stale), tuple(messages), tuple(problems))
