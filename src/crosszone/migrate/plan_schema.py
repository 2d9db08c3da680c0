"""The one schema of a migration plan, validated on every path that brings one in.

A plan comes from the command line (`crosszone migrate start|plan`, built by `make_plan`), from
the controller's API (`POST /v1/migration/start`, JSON), and from the store (the plan persisted
with the state, read again by every resumed runner). All three go through `PlanSchema`, so a
plan the CLI refuses is refused by the API with 422 naming the field, and a plan poisoned in
the store is reported instead of raising TypeError or KeyError in a runner (issue 25, points 6
and 7).

Rules: steps are integers, strictly increasing, in 1..100, ending at 100 (all traffic moved);
dwells are finite numbers >= 0 (NaN and infinity are not durations); `agent_lost_s` (how long
a crosszone gateway may give no sign of life before it is lost) a finite number >= 1; limits
name every guard and canary check of plan.py, each a finite number >= 0; nothing else, no
unknown key. Types are strict: "10" is not a step, true is not a number.
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from crosszone.migrate.plan import (
    CANARY_DOCS,
    DEFAULT_AGENT_LOST_S,
    DEFAULT_DWELL_S,
    DEFAULT_STEPS,
    GUARD_DOCS,
    Plan,
)
from crosszone.migrate.plan import PlanError as PlanError

Duration = Annotated[float, Field(ge=0, allow_inf_nan=False)]
#: at least a second: an agent that is alive reports a change within one
LostAfter = Annotated[float, Field(ge=1, allow_inf_nan=False)]
Limit = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=253)]
LIMIT_NAMES = tuple(GUARD_DOCS | CANARY_DOCS)


class PlanSchema(BaseModel):
    """A migration plan as JSON (the `plan` part of `migrate plan --json`)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    source: Name = "legacy"
    target: Name = "crosszone"
    canary: Name | None = None
    steps: list[int] = Field(default_factory=lambda: list(DEFAULT_STEPS))
    dwell_s: Duration = DEFAULT_DWELL_S
    canary_dwell_s: Duration = DEFAULT_DWELL_S
    agent_lost_s: LostAfter = DEFAULT_AGENT_LOST_S
    limits: dict[str, Limit] = Field(default_factory=lambda: {
        k: v[0] for k, v in (GUARD_DOCS | CANARY_DOCS).items()})

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: list[int]) -> list[int]:
        if not steps:
            raise ValueError("at least one step (the last one 100)")
        if any(not 0 < s <= 100 for s in steps):
            raise ValueError(f"percentages in 1..100, got {steps}")
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise ValueError(f"strictly increasing, got {steps}")
        if steps[-1] != 100:
            raise ValueError(f"the last step must be 100 (all traffic moved), got {steps}")
        return steps

    @field_validator("limits")
    @classmethod
    def _limits(cls, limits: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(limits) - set(LIMIT_NAMES))
        if unknown:
            raise ValueError(f"unknown guard {', '.join(unknown)} (known: "
                             f"{', '.join(LIMIT_NAMES)})")
        missing = [k for k in LIMIT_NAMES if k not in limits]
        if missing:
            raise ValueError(f"every guard needs a limit; missing {', '.join(missing)}")
        return limits

    def plan(self) -> Plan:
        """The engine's frozen Plan."""
        return Plan(source=self.source, target=self.target, canary=self.canary,
                    steps=tuple(self.steps), dwell_s=float(self.dwell_s),
                    canary_dwell_s=float(self.canary_dwell_s),
                    agent_lost_s=float(self.agent_lost_s),
                    limits={k: float(self.limits[k]) for k in LIMIT_NAMES})


def _error(exc: ValidationError, where: str) -> PlanError:
    """The first problem, naming the field (`plan.steps.0`, `plan.limits`)."""
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "json_invalid":
        return PlanError(f"{where}: not a JSON object: {msg}")
    return PlanError(f"{where}{'.' + loc if loc else ''}: {msg}")


def plan_from_json(data: Any, where: str = "plan") -> Plan:
    """A Plan from a decoded JSON value (PlanError naming the field when it is not one)."""
    if not isinstance(data, dict):
        raise PlanError(f"{where}: a JSON object, got {type(data).__name__}")
    try:
        return PlanSchema.model_validate(data).plan()
    except ValidationError as exc:
        raise _error(exc, where) from None
    except RecursionError:
        raise PlanError(f"{where}: nested too deeply") from None


def plan_from_bytes(raw: bytes, where: str = "plan") -> Plan:
    """A Plan from a JSON body; an empty body or `{}` is the default plan. The parser's own
    depth limit refuses a deeply nested body (as the API's other bodies are refused)."""
    try:
        return PlanSchema.model_validate_json(raw.strip() or b"{}").plan()
    except ValidationError as exc:
        raise _error(exc, where) from None


def checked(plan: Plan, where: str = "plan") -> Plan:
    """The same plan once the schema accepted it (a plan built in code, e.g. by the CLI)."""
    try:
        doc = plan.to_json()
    except TypeError:  # steps that are not a sequence
        raise PlanError(f"{where}.steps: a list of percentages, got {plan.steps!r}") from None
    return plan_from_json(doc, where)
