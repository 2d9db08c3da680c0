"""The fluid model against a small emulated gateway tier (plan/validation.py; root only).

Its own namespaces (`czval-*`): two gateways shaped to 200 Mbit/s, flows placed by the kernel's
L4 ECMP hash, one calibration flow for the goodput factor, then the shipped mixes. Runs in
~15-20 s; the namespaces are gone afterwards even when the run fails.
"""

from __future__ import annotations

import os

import pytest

from crosszone.plan import validation

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run() -> validation.ValidationRun:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, tc)")
    try:
        return validation.run_validation()
    finally:
        assert not [n for n in os.listdir("/run/netns") if n.startswith(validation.PREFIX)]


def test_calibration_is_sane(run: validation.ValidationRun) -> None:
    # TCP payload over 1514-byte frames is at most 1448/1514 = 0.956 of the shaped rate.
    assert 0.85 < run.goodput_factor < 0.97
    assert run.unshaped_gbps > 4 * 2 * run.rate_mbit * 1e-3


def test_placement_is_the_hash(run: validation.ValidationRun) -> None:
    by_name = {m.mix: m for m in run.mixes}
    collision = by_name["collision"]
    on_0 = [f.name for f in collision.elephants if f.gateway == 0]
    assert on_0 == ["e1", "e2", "e3"]
    # The byte counters of the gateways match the placement (checked inside the run too).
    assert collision.counter_bytes[0] > 1.5 * collision.counter_bytes[1]


def test_error_bound(run: validation.ValidationRun) -> None:
    errors = {m.mix: (m.mean_rel_error, m.max_rel_error, m.batch_rel_error) for m in run.mixes}
    # Mean per-flow error and batch error within 15 % on at least one mix ...
    assert any(m.within_target for m in run.mixes), errors
    # ... and the batch (what a training step waits for) within 15 % on every mix.
    for m in run.mixes:
        assert abs(m.batch_rel_error) <= validation.TARGET, errors


def test_same_flows_finish_last(run: validation.ValidationRun) -> None:
    collision = {m.mix: m for m in run.mixes}["collision"]
    model = {f.name: f.model_s for f in collision.flows}
    assert sorted(validation.last_finishers(model)) == ["e1", "e2", "e3"]
    last3 = sorted(collision.flows, key=lambda f: f.start_s + f.measured_s)[-3:]
    # every flow's gateway, start, measured and modelled time in the message: one CI run in
    # several measured e1, e3, e4 last, and only the names were kept
    assert sorted(f.name for f in last3) == ["e1", "e2", "e3"], [
        (f.name, f.gateway, round(f.start_s, 3), round(f.measured_s, 3), round(f.model_s, 3))
        for f in collision.flows]
    assert collision.last_agree
    # In the other mixes the model's last group spans most flows that end within 15 % of each
    # other, and the order inside it is a coin toss in any emulation (it failed one CI run in a
    # few): it is reported (`last_finishers_agree`), not asserted.
