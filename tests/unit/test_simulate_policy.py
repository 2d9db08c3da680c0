"""The simulator takes the traffic policy as the intent gives it (`policy:` in a scenario)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crosszone.cli import app
from crosszone.plan.fluid import simulate
from crosszone.plan.scenario import scenario_from_mapping
from crosszone.plan.units import PlanInputError

pytestmark = pytest.mark.unit

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "emulated-policy.yaml"


def _raw(**policy: Any) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(SCENARIO.read_text())
    raw["policy"] = {**raw["policy"], **policy}
    return raw


def test_policy_decides_priority_and_flowlets() -> None:
    on = scenario_from_mapping(_raw(enabled=True), "s.yaml")
    off = scenario_from_mapping(_raw(enabled=False), "s.yaml")
    assert on.small_priority and on.flowlets
    assert not off.small_priority and not off.flowlets
    assert off.with_policy(True) == on


def test_a_request_past_elephant_bytes_is_not_small() -> None:
    s = scenario_from_mapping(_raw(enabled=True, elephant_bytes=4096), "s.yaml")
    assert not s.small_priority  # 4 KiB requests reach the threshold: demoted like elephants
    assert s.flowlets


def test_without_policy_the_flags_decide() -> None:
    raw = _raw()
    del raw["policy"]
    raw["small_requests"]["priority"] = True
    s = scenario_from_mapping(raw, "s.yaml")
    assert s.small_priority and not s.flowlets and s.policy is None


@pytest.mark.parametrize("section, flag", [("small_requests", "priority"),
                                           ("ecmp", "flowlets")])
def test_policy_and_flag_together_are_rejected(section: str, flag: str) -> None:
    raw = _raw()
    raw[section][flag] = True
    with pytest.raises(PlanInputError, match=f"{section}.{flag} and policy"):
        scenario_from_mapping(raw, "s.yaml")


@pytest.mark.parametrize("policy, field", [({"enabled": "on"}, "policy.enabled"),
                                           ({"small_dscp": 99}, "policy.small_dscp"),
                                           ({"elephant_bytes": 0}, "policy.elephant_bytes"),
                                           ({"weight": 2}, "policy.weight")])
def test_bad_policy_fields_are_named(policy: dict[str, Any], field: str) -> None:
    with pytest.raises(PlanInputError, match=field):
        scenario_from_mapping(_raw(**policy), "s.yaml")


def test_priority_cuts_the_small_requests_delay_on_a_saturated_port() -> None:
    base = scenario_from_mapping(_raw(enabled=False), "s.yaml")
    off, on = simulate(base).tiers[0], simulate(base.with_policy(True)).tiers[0]
    assert off.small_delay_p99_us > 5 * on.small_delay_p99_us
    # Priority leaves the elephants' capacity as it was: the dataset load takes as long.
    assert on.dataset_load_s == pytest.approx(off.dataset_load_s, rel=0.3)


def test_cli_policy_switch_overrides_the_scenario() -> None:
    res = CliRunner().invoke(app, ["simulate", str(SCENARIO), "--policy", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["policy"] == "on" and doc["small_priority"] and doc["flowlets"]
    res = CliRunner().invoke(app, ["simulate", str(SCENARIO), "--json"])
    assert json.loads(res.output)["policy"] == "off"
