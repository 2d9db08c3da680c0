"""One checker (intent/checks.py): the controller's delta check and `crosszone check`'s table
counts use its route count and capacity check instead of their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from crosszone.abi import layout
from crosszone.control.service import Controller
from crosszone.intent.checks import route_counts
from crosszone.intent.cluster import load_cluster, parse_cluster, table_counts
from crosszone.intent.errors import InvalidIntentError
from crosszone.store.sqlite_store import SqliteStore

pytestmark = pytest.mark.unit

CLUSTER = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


def test_the_table_counts_are_the_checkers() -> None:
    c = load_cluster(CLUSTER)
    r4, r6 = route_counts(c)
    assert r4 > 0 and r6 > 0
    assert table_counts(c)["routes"] == r4 + r6


def test_the_delta_check_and_the_full_check_refuse_alike(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """At the limit, one more prefix is refused by a route change and by a whole apply, with
    the same message: both come from check_route_capacity."""
    ctl = Controller(SqliteStore(str(tmp_path / "s.db")))
    ctl.apply(CLUSTER.read_text(), source=str(CLUSTER))
    r4, _ = route_counts(load_cluster(CLUSTER))
    monkeypatch.setattr(layout, "CZ_MAX_ROUTES4", r4)
    with pytest.raises(InvalidIntentError, match=f"tables hold {r4} /") as delta:
        ctl.change_prefixes("checkpoints", ["10.5.0.0/16"], [])
    grown = CLUSTER.read_text().replace("172.16.99.0/24, action: drop}",
                                        "172.16.99.0/24, action: drop}\n"
                                        "      - {prefix: 172.16.97.0/24, action: drop}")
    assert grown != CLUSTER.read_text()
    with pytest.raises(InvalidIntentError, match=f"tables hold {r4} /") as full:
        parse_cluster(grown, "grown.yaml")
    assert delta.value.where == full.value.where == "vpcs"
    assert str(delta.value).split(": ", 2)[-1] == str(full.value).split(": ", 2)[-1]
