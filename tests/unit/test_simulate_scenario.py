"""Scenario files: the shipped examples load, and bad scenarios fail with a named field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crosszone.plan.scenario import (
    cluster_scale_mapping,
    load_scenario,
    scenario_from_mapping,
)
from crosszone.plan.units import PlanInputError

pytestmark = pytest.mark.unit

SCENARIOS = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


@pytest.mark.parametrize("name", ["reference.yaml", "rack.yaml", "seed-case.yaml"])
def test_examples_load(name):
    scenario = load_scenario((SCENARIOS / name).read_text(), name)
    assert scenario.tiers


def test_reference_case_matches_architecture():
    ref = load_scenario((SCENARIOS / "reference.yaml").read_text(), "reference.yaml")
    assert ref.cluster.servers == 50
    assert ref.peak_gbps == 2500
    assert [(t.devices, t.gbps_per_device) for t in ref.tiers] == [(44, 50), (55, 50), (2, 1600)]
    assert ref.duration == 3600


def _raw():
    return yaml.safe_load((SCENARIOS / "reference.yaml").read_text())


def _error(raw) -> PlanInputError:
    with pytest.raises(PlanInputError) as info:
        scenario_from_mapping(raw, "s.yaml")
    return info.value


@pytest.mark.parametrize(
    ("section", "key", "value", "field"),
    [
        ("cluster", "servers", -5, "cluster.servers"),
        ("cluster", "servers", 0, "cluster.servers"),
        ("cluster", "nic_gbps", "50GBps", "cluster.nic_gbps"),
        ("cluster", "nic_gbps", "50", "cluster.nic_gbps"),
        ("dataset", "bytes_per_server", "5 parsecs", "dataset.bytes_per_server"),
        ("dataset", "bytes_per_server", "-5GB", "dataset.bytes_per_server"),
        ("dataset", "streams", 0, "dataset.streams"),
        ("training", "compute_per_step", "2 fortnights", "training.compute_per_step"),
        ("training", "compute_per_step", [1], "training.compute_per_step"),
        ("checkpoint", "every_steps", "often", "checkpoint.every_steps"),
        ("small_requests", "rate_per_server", -1, "small_requests.rate_per_server"),
        ("ecmp", "flowlets", "maybe", "ecmp.flowlets"),
        ("cluster", "turbo", True, "cluster.turbo"),
    ],
)
def test_bad_fields_are_named(section, key, value, field):
    raw = _raw()
    raw[section][key] = value
    err = _error(raw)
    assert err.source == "s.yaml"
    assert err.field == field


def test_bad_tier_names_its_index_and_name():
    raw = _raw()
    raw["tiers"][1]["gbps_per_device"] = "-50Gbps"
    err = _error(raw)
    assert err.field == "tiers[1] (x86 55 x 50G).gbps_per_device"
    assert "negative" in err.reason


def test_missing_and_duplicate():
    raw = _raw()
    del raw["cluster"]
    assert _error(raw).field == "cluster"
    raw = _raw()
    # Tier 1, not one the published block names: else that block's check speaks first.
    raw["tiers"][1]["name"] = raw["tiers"][0]["name"]
    assert "twice" in str(_error(raw))
    raw = _raw()
    raw["tiers"] = []
    assert _error(raw).field == "tiers"
    with pytest.raises(PlanInputError, match="mapping"):
        load_scenario("[1, 2]", "s.yaml")
    with pytest.raises(PlanInputError, match="not valid YAML"):
        load_scenario("a: [", "s.yaml")


def test_cluster_scale_tiers_follow_the_plan_rule():
    raw = cluster_scale_mapping(10000)
    assert [t["devices"] for t in raw["tiers"]] == [11000, 344]
    scenario_from_mapping(raw, "bench")
