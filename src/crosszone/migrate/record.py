"""The stored migration document (`migration/state`), checked on every read.

Only the runner writes it (engine.py); everyone reads it: the CLI, the controller's API, the
dashboard and metrics, the driver of a resumed runner. A value that is not a usable migration
(not JSON, nested too deeply, a field of the wrong type, a plan the schema refuses) reads as a
State whose `error` says why (`unreadable` when the document itself is not one), so no reader
fails on it and every operation on it is refused with that reason (issue 25, points 7 and 10).
The history is bounded (`fold_history`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeGuard

from crosszone.migrate.plan import Plan, PlanError
from crosszone.migrate.plan_schema import plan_from_json

KEY = "migration/state"
#: States in which a runner has work to do (or holds a position under monitoring).
ACTIVE = ("canary", "shifting", "paused", "shifted", "draining")
#: States after which nothing happens until a new `start`.
FINAL = ("none", "finished", "rolled_back")
#: What a stored state that is not a state document reads as (`error` says why).
UNREADABLE = "unreadable"
#: History entries kept; older ones are folded into the first entry (event "summary").
HISTORY_KEEP = 100


class MigrationError(RuntimeError):
    """An operation that does not apply to the current state, or a refused start."""


def json_object(raw: bytes | None) -> dict[str, Any] | None:
    """A stored JSON object, or None (absent, not JSON, nested too deeply, not an object)."""
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def num(x: object) -> TypeGuard[float]:
    """A finite number (not bool)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _percent(x: object) -> bool:
    return _int(x) and 0 <= x <= 100


def _opt(check: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda x: x is None or check(x)


def _entry(x: object) -> bool:
    return isinstance(x, dict) and num(x.get("t")) and isinstance(x.get("event"), str) \
        and _int(x.get("step")) and _int(x.get("weight_new")) \
        and _opt(lambda r: isinstance(r, str))(x.get("reason"))


def _guard(x: object) -> bool:
    return isinstance(x, dict) and isinstance(x.get("name"), str) and num(x.get("value")) \
        and num(x.get("limit")) and isinstance(x.get("ok"), bool)


#: Each stored field: what a usable value is (the state document is checked on every read).
_FIELDS: dict[str, Callable[[object], bool]] = {
    "state": lambda x: x in ACTIVE or x in FINAL,
    "step": _percent,
    "weight_new": _percent,
    "history": lambda x: isinstance(x, list) and all(_entry(e) for e in x),
    "guards": lambda x: isinstance(x, list) and all(_guard(g) for g in x),
    "plan": _opt(lambda x: isinstance(x, dict)),
    "since": num,
    "last_good": _percent,
    "paused_from": _opt(lambda x: x in ACTIVE),
    "reason": _opt(lambda x: isinstance(x, str)),
    "retired": lambda x: isinstance(x, list) and all(isinstance(g, str) for g in x),
    "drain_mark": _opt(_int),
    "baselines": lambda x: isinstance(x, dict) and all(
        isinstance(k, str) and num(v) for k, v in x.items()),
    "moving_to": _opt(_percent),
    "lost": lambda x: isinstance(x, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in x.items()),
}


@dataclass
class State:
    """The persisted migration (`migration/state`; contract: state, step, weight_new, history,
    guards; the rest is the engine's own bookkeeping)."""

    state: str = "none"
    step: int = 0                       # index into plan.steps, 1-based (0: before any)
    weight_new: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    guards: list[dict[str, Any]] = field(default_factory=list)
    plan: dict[str, Any] | None = None
    since: float = 0.0                  # clock when the current dwell began
    last_good: int = 0                  # last step whose dwell held (0: canary)
    paused_from: str | None = None      # state to go back to on resume
    reason: str | None = None           # why the last automatic action was taken
    retired: list[str] = field(default_factory=list)
    drain_mark: int | None = None       # source packet counter when the drain dwell began
    #: measured before the first step and kept for the whole migration: small_p99_ms
    baselines: dict[str, float] = field(default_factory=dict)
    moving_to: int | None = None        # a weight move under way (written before it starts)
    #: gateways lost during this migration (drained, left out of every move): gateway -> why
    lost: dict[str, str] = field(default_factory=dict)
    #: why this stored migration cannot be used (set when read, never stored)
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The stored document (and the status, with `error` when there is one)."""
        d = asdict(self)
        if d["error"] is None:
            del d["error"]
        return d

    @classmethod
    def from_json(cls, d: object) -> State:
        """A stored document, checked field by field (ValueError naming the first bad field;
        unknown keys ignored: a newer writer may add some)."""
        if not isinstance(d, dict):
            raise ValueError(f"not a JSON object but {type(d).__name__}")
        for name, ok in _FIELDS.items():
            if name in d and not ok(d[name]):
                raise ValueError(f"field {name!r} holds {json.dumps(d[name])[:80]}")
        return cls(**{k: v for k, v in d.items() if k in _FIELDS})

    @property
    def the_plan(self) -> Plan:
        """The plan this migration runs (MigrationError if there is none or it is invalid)."""
        if self.plan is None:
            raise MigrationError("no migration has been started")
        try:
            return plan_from_json(self.plan, "stored plan")
        except PlanError as exc:
            raise MigrationError(str(exc)) from None


def decode(raw: bytes | None) -> State:
    """A stored migration: State() when there is none; one that says why (`error`) when it
    cannot be used (not JSON, nested too deeply, a wrong field, an invalid plan)."""
    if raw is None:
        return State()
    try:
        st = State.from_json(json.loads(raw))
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        return State(state=UNREADABLE, error=f"the stored migration state is unreadable: {why}")
    if st.plan is not None:
        try:
            st.the_plan  # noqa: B018  (validated for its error)
        except MigrationError as exc:
            st.error = f"the stored migration's plan cannot be used: {exc}"
    elif st.state in ACTIVE:
        st.error = f"the stored migration is {st.state!r} but holds no plan"
    return st


def fold_history(history: list[dict[str, Any]], keep: int = HISTORY_KEEP) -> None:
    """Keep the last `keep` entries: the older ones become one summary entry, first, that
    counts them by event (and carries the counts of an earlier summary)."""
    if len(history) <= keep:
        return
    head = history[0] if history and history[0].get("event") == "summary" else None
    body = history[1:] if head else history
    cut = len(body) - (keep - 1)
    old, rest = body[:cut], body[cut:]
    counts: dict[str, int] = dict(head.get("events", {})) if head else {}
    for e in old:
        counts[e["event"]] = counts.get(e["event"], 0) + 1
    folded = (head.get("folded", 0) if head else 0) + len(old)
    last = old[-1]
    summary = {"t": head["t"] if head else old[0]["t"], "event": "summary",
               "step": last["step"], "weight_new": last["weight_new"],
               "reason": f"{folded} older entries folded (by event: "
                         + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")",
               "folded": folded, "events": counts, "until": last["t"]}
    history[:] = [summary, *rest]


