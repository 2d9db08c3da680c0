"""The policy cost bench's arithmetic: rotated order and paired deltas (no kernel needed)."""

from __future__ import annotations

import pytest

from crosszone_lab.bench.fastpath_policy import interleave, paired_deltas


def test_every_setting_leads_a_round_in_turn_and_runs_once_per_round():
    names = ["off", "on", "on_with_rate", "on_fixed_clock"]
    orders = interleave(names, 8)
    assert len(orders) == 8
    for order in orders:
        assert sorted(order) == sorted(names)
    assert [o[0] for o in orders] == names + names
    # no setting always follows the same neighbour
    followers = {(o[i], o[i + 1]) for o in orders for i in range(3)}
    assert ("off", "on") in followers and ("on", "on_with_rate") in followers


def test_paired_delta_cancels_a_drift_the_difference_of_medians_keeps():
    # on costs 10 ns more than off in three rounds of five; the box was 40 ns slower for off's last
    # two rounds and for on's first two, so the medians put 50 ns between them
    off = [100.0, 100.0, 100.0, 140.0, 140.0]
    on = [150.0, 150.0, 110.0, 150.0, 150.0]
    row = paired_deltas({"off": off, "on": on})
    assert row["policy_on_delta_ns"] == 10.0
    assert row["policy_on_delta_of_medians_ns"] == 50.0
    assert row["best_policy_on_delta_ns"] == 10.0
    assert row["policy_off_ns_per_pkt"] == 100.0


def test_rounds_of_different_lengths_are_an_error():
    with pytest.raises(ValueError):
        paired_deltas({"off": [1.0, 2.0], "on": [1.0]})
