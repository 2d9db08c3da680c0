"""What a migration will do: the steps, the dwell, the canary and the guard limits.

A plan is pure data, validated once: `crosszone migrate plan` prints it without touching
anything, `start` persists it with the migration state so that a resumed run follows the same
plan even if the command line that resumes it says nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crosszone.intent import strict_yaml

DEFAULT_STEPS = (1, 10, 25, 50, 100)
DEFAULT_DWELL_S = 30.0
#: A target gateway whose agent gave no sign of life (a status written, its metrics read) for
#: this long is lost: drained, and the migration rolled back (migrate/lost_gateways.py). Under
#: the 30 s heartbeat of an idle agent's status, because the runner also reads its metrics;
#: above the few seconds a restarted agent takes to report again.
DEFAULT_AGENT_LOST_S = 20.0

#: Guard name -> (default limit, what it watches). A guard holds while value <= limit.
GUARD_DOCS: dict[str, tuple[float, str]] = {
    "errors": (0, "failed guard probes (HTTP reads of known content, every compute endpoint to "
                  "every storage node, IPv4 and IPv6) during the dwell"),
    "small_p99_factor": (3.0, "p99 latency of the guard probes divided by the p99 measured "
                              "through the legacy gateways before the first step"),
    "drops": (0, "packets the new gateways' fast paths dropped during the dwell, any reason "
                 "other than the benign ones (not ours, to the gateway)"),
    "sessions_down": (0, "BGP sessions of the routers with any gateway that are not "
                         "Established, and BFD sessions that are not up"),
    "agents_unhealthy": (0, "crosszone agents whose metrics endpoint does not answer or whose "
                            "applied revision lags the desired one"),
}
#: The canary verdict: probe errors allowed, and the latency factor against the legacy path.
CANARY_DOCS: dict[str, tuple[float, str]] = {
    "canary_errors": (0, "failed canary reads (known content, byte-exact) through the canary "
                         "prefix that only the new gateways serve"),
    "canary_latency_factor": (3.0, "canary read p99 divided by the same reads' p99 through the "
                                   "legacy gateways"),
}


class PlanError(ValueError):
    """A plan argument or guards file that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Plan:
    """One migration's parameters."""

    source: str = "legacy"
    target: str = "crosszone"
    canary: str | None = None
    steps: tuple[int, ...] = DEFAULT_STEPS
    dwell_s: float = DEFAULT_DWELL_S
    canary_dwell_s: float = DEFAULT_DWELL_S
    #: seconds without a sign of life after which a crosszone gateway is lost
    agent_lost_s: float = DEFAULT_AGENT_LOST_S
    #: every guard and canary limit by name
    limits: dict[str, float] = field(default_factory=lambda: {
        k: v[0] for k, v in (GUARD_DOCS | CANARY_DOCS).items()})

    def to_json(self) -> dict[str, Any]:
        """JSON form (persisted with the state)."""
        d = asdict(self)
        d["steps"] = list(self.steps)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        """Inverse of to_json, through the one plan schema (plan_schema.py; PlanError naming
        the field): a stored or received plan is never taken unchecked."""
        from crosszone.migrate.plan_schema import plan_from_json  # it imports this module

        return plan_from_json(d)

    def describe(self) -> list[dict[str, Any]]:
        """The phases in order, each with the checks that gate it (what `plan` prints)."""
        guards = [{"name": k, "limit": self.limits[k], "watches": GUARD_DOCS[k][1]}
                  for k in GUARD_DOCS]
        out: list[dict[str, Any]] = [{
            "phase": "parity",
            "checks": [f"each {self.target} gateway's maps, read back from the kernel, equal "
                       "what the current intent compiles to for it",
                       "BGP and BFD sessions of every gateway up"]}]
        out.append({"phase": "canary", "vpc": self.canary, "dwell_s": self.canary_dwell_s,
                    "checks": [{"name": k, "limit": self.limits[k], "watches": CANARY_DOCS[k][1]}
                               for k in CANARY_DOCS]})
        for i, w in enumerate(self.steps, start=1):
            out.append({"phase": "shift", "step": i, "weight_new": w, "dwell_s": self.dwell_s,
                        "how": ("legacy gateways drained by the graceful-shutdown community "
                                "(RFC 8326)" if w == 100 else
                                "weighted ECMP by the BGP link-bandwidth extended community"),
                        "checks": guards})
        out.append({"phase": "finish", "dwell_s": self.dwell_s,
                    "checks": [f"{self.source} gateways forward no packet during the dwell"],
                    "then": f"{self.source} gateways withdrawn and marked retired"})
        return out


def parse_steps(text: str) -> tuple[int, ...]:
    """'1,10,25,50,100' -> (1, 10, 25, 50, 100): increasing percentages ending at 100."""
    try:
        steps = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise PlanError(f"--steps {text!r}: comma-separated integers, e.g. 1,10,25,50,100"
                        ) from None
    if not steps or steps[-1] != 100:
        raise PlanError(f"--steps {text!r}: the last step must be 100 (all traffic moved)")
    if any(not 0 < s <= 100 for s in steps) or list(steps) != sorted(set(steps)):
        raise PlanError(f"--steps {text!r}: strictly increasing percentages in 1..100")
    return steps


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m)?$")


def parse_dwell(text: str) -> float:
    """'30s', '500ms', '2m' or a bare number of seconds -> seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise PlanError(f"--dwell {text!r}: a duration such as 30s, 500ms or 2m")
    scale = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}[m.group(2)]
    return float(m.group(1)) * scale


def load_guards(path: Path | None) -> dict[str, float]:
    """Guard limits: the defaults, overridden by a YAML/JSON mapping of name to number (read in
    the strict dialect, intent/strict_yaml.py: `010`, `1:30` or `no` is not a number)."""
    limits = {k: v[0] for k, v in (GUARD_DOCS | CANARY_DOCS).items()}
    if path is None:
        return limits
    try:
        text = path.read_text()
    except OSError as exc:
        raise PlanError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        raw = strict_yaml.load(text, str(path))
    except strict_yaml.YamlInputError as exc:
        raise PlanError(str(exc)) from None
    if not isinstance(raw, dict):
        raise PlanError(f"{path}: a mapping of guard name to limit")
    for name, value in raw.items():
        if name in limits and not isinstance(value, bool) and isinstance(value, int | float) \
                and value >= 0:
            limits[name] = float(value)
            continue
        line, note = strict_yaml.where(text, (name,))
        at = f"{path}:{line}" if line else str(path)
        if name not in limits:
            raise PlanError(f"{at}: unknown guard {name!r} (known: {', '.join(limits)})")
        raise PlanError(f"{at}: {name}: a number >= 0, got {json.dumps(value)}"
                        + (f" ({note})" if note else ""))
    return limits
