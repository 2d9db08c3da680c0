"""The fixture table through the reference model (no root needed)."""

from __future__ import annotations

import pytest

from fixture_runs import check, model_runner
from packet_fixtures import fixtures, ids

ROWS = fixtures()


@pytest.mark.parametrize("row", ROWS, ids=ids(ROWS))
def test_model_matches_fixture(row):
    run, bound = model_runner(row.ingress)
    check(row, run(row.frame), bound)


def test_table_covers_every_direction_and_verdict():
    actions = {r.action.name for r in ROWS}
    assert actions == {"REDIRECT", "TX", "PASS", "DROP"}
    negatives = [r for r in ROWS if r.action.name in ("PASS", "DROP")]
    assert len(negatives) > len(ROWS) / 2
