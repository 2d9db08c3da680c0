"""The planner's scenario and catalog are read in the one strict YAML dialect
(intent/strict_yaml.py, with decimal fractions as floats): a key given twice is an error, and
YAML 1.1 surprises (`01751` octal, `yes` a boolean) stay strings for the schema to refuse."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crosszone.intent.strict_yaml import StrictNumbersLoader
from crosszone.plan.catalog import load_catalog
from crosszone.plan.scenario import load_scenario
from crosszone.plan.units import PlanInputError

pytestmark = pytest.mark.unit

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_numbers_are_yaml_1_2_core() -> None:
    got = yaml.load("a: 0.85\nb: 1e9\nc: 01751\nd: 12\ne: .5\nf: yes\ng: 16:41\nh: 1_000.5\n"
                    "i: -2.5E-3\n", Loader=StrictNumbersLoader)
    assert got == {"a": 0.85, "b": 1e9, "c": "01751", "d": 12, "e": 0.5, "f": "yes",
                   "g": "16:41", "h": "1_000.5", "i": -2.5e-3}


@pytest.mark.parametrize("name", ["rack.yaml", "reference.yaml"])
def test_a_scenario_key_given_twice_is_refused(name: str) -> None:
    text = (EXAMPLES / "scenarios" / name).read_text()
    first = next(line for line in text.splitlines() if line and not line.startswith("#"))
    with pytest.raises(PlanInputError, match="given twice"):
        load_scenario(text + "\n" + first + "\n", name)


def test_a_catalog_key_given_twice_is_refused() -> None:
    text = (EXAMPLES / "catalog.yaml").read_text()
    first = next(line for line in text.splitlines() if line and not line.startswith("#"))
    with pytest.raises(PlanInputError, match="given twice"):
        load_catalog(text + "\n" + first + "\n", "catalog.yaml")


def test_the_examples_still_load() -> None:
    for path in sorted((EXAMPLES / "scenarios").glob("*.yaml")):
        load_scenario(path.read_text(), str(path))
    load_catalog((EXAMPLES / "catalog.yaml").read_text(), "catalog.yaml")
