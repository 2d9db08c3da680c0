"""Published figures next to simulated ones: what a source reports for a case, and what we get.

A scenario's `published:` block names the two tiers a source compared (its baseline and the tier
that replaced it) and the reductions it reported. This module turns a simulation of that scenario
into the same reductions, 1 - candidate / baseline, so that `crosszone simulate` can print both and
a test can pin how close the model comes. Pure: a Scenario and a SimulationResult in, a
Comparison out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from crosszone.plan.fluid import SimulationResult, TierResult
from crosszone.plan.scenario import Scenario

__all__ = ["Comparison", "FigureComparison", "compare_published"]

# Why the cost row has no simulated figure: tier prices are a sizing question, and the catalog
# (with each price's source) belongs to `crosszone plan`.
HARDWARE_COST_NOTE = "not simulated (crosszone plan)"


@dataclass(frozen=True)
class FigureComparison:
    """One figure: the published reduction, the simulated one, and the two tiers' values."""

    figure: str
    published: float | None  # reduction as a share of the baseline; None: the source gives none
    simulated: float | None  # None: the simulation does not compute this figure
    baseline_value: float | None
    candidate_value: float | None
    unit: str
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (part of `crosszone simulate --json`)."""
        return {
            "figure": self.figure,
            "published_reduction": self.published,
            "simulated_reduction": None if self.simulated is None else round(self.simulated, 6),
            "baseline": None if self.baseline_value is None else round(self.baseline_value, 6),
            "candidate": None if self.candidate_value is None else round(self.candidate_value, 6),
            "unit": self.unit,
            "note": self.note,
        }


@dataclass(frozen=True)
class Comparison:
    """The published figures of a scenario against its simulation."""

    source: str
    baseline: str
    candidate: str
    figures: tuple[FigureComparison, ...]

    def figure(self, name: str) -> FigureComparison:
        """The comparison of one figure by name ('dataset load', 'training time', ...)."""
        for f in self.figures:
            if f.figure == name:
                return f
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (the `published` part of `crosszone simulate --json`)."""
        return {
            "source": self.source,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "figures": [f.to_json() for f in self.figures],
        }


def _reduction(baseline: float, candidate: float) -> float:
    """1 - candidate / baseline: the share of the baseline's time the candidate saves."""
    return 1.0 - candidate / baseline if baseline > 0 else 0.0


def _tier(result: SimulationResult, name: str) -> TierResult:
    for tier in result.tiers:
        if tier.name == name:
            return tier
    # The scenario's validator makes published tiers exist; a result of another scenario does not.
    raise ValueError(f"the simulation has no tier named {name!r}")


def compare_published(scenario: Scenario, result: SimulationResult) -> Comparison | None:
    """The scenario's published figures against `result` (its simulation); None without any."""
    published = scenario.published
    if published is None:
        return None
    base, cand = _tier(result, published.baseline), _tier(result, published.candidate)
    figures = [
        FigureComparison(
            "dataset load",
            published.dataset_load_reduction,
            _reduction(base.dataset_load_s, cand.dataset_load_s),
            base.dataset_load_s,
            cand.dataset_load_s,
            "s",
        ),
        FigureComparison(
            "training time",
            published.training_time_reduction,
            _reduction(base.training_s, cand.training_s),
            base.training_s / 3600,
            cand.training_s / 3600,
            "h",
        ),
    ]
    if published.hardware_cost_reduction is not None:
        figures.append(
            FigureComparison(
                "hardware cost",
                published.hardware_cost_reduction,
                None,
                None,
                None,
                "",
                HARDWARE_COST_NOTE,
            )
        )
    return Comparison(published.source, published.baseline, published.candidate, tuple(figures))
