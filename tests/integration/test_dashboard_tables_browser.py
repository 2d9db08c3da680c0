"""The dashboard's per-class tables in a real browser: the traffic policy per VPC and class, and
the shaped queues per port group and class (served in strict-priority order), with the values
Prometheus answered. The controller runs in this process on 127.0.0.1, its Prometheus reader
answers from a table (no emulation needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app_server import serving
from crosszone.control import dashboard
from crosszone.control.api import create_app
from crosszone.control.service import Controller
from crosszone.store.sqlite_store import SqliteStore

from browser import chromium, foreign, requested_urls, wait_for

#: expression -> [(labels, latest value)]
ANSWERS: dict[str, list[tuple[dict[str, str], str]]] = {
    "crosszone:class_bits:rate5s": [({"vpc": "blue", "class": "small"}, "1.5e6"),
                                    ({"vpc": "blue", "class": "bulk"}, "3.2e7"),
                                    ({"vpc": "red", "class": "bulk"}, "0")],
    "crosszone:class_packets:rate5s": [({"vpc": "blue", "class": "small"}, "900"),
                                       ({"vpc": "blue", "class": "bulk"}, "2700")],
    "crosszone:rate_drops:rate5s": [({"vpc": "blue"}, "4")],
    "crosszone:queue_bits:rate10s": [({"group": "hosts", "class": "bulk"}, "3.8e7"),
                                     ({"group": "hosts", "class": "small"}, "1.2e6"),
                                     ({"group": "hosts", "class": "default"}, "0"),
                                     ({"group": "storage", "class": "bulk"}, "2e7")],
    "crosszone:queue_drops:rate10s": [({"group": "hosts", "class": "bulk"}, "41.5"),
                                      ({"group": "hosts", "class": "small"}, "0")],
    "crosszone:queue_backlog_bytes:sum": [({"group": "hosts", "class": "bulk"}, "1048576"),
                                          ({"group": "hosts", "class": "small"}, "1536")],
}


class TableProm:
    """A Prometheus reader answering range queries from ANSWERS, instant ones with nothing."""

    def __init__(self, url: str) -> None:
        self.url = url

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        return [{"metric": m, "values": [[end - step, "7"], [end, v]]}
                for m, v in ANSWERS.get(expr, [])]

    def instant(self, expr: str) -> list[dict[str, Any]]:
        return []


@pytest.fixture
def controller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(dashboard, "PrometheusReader", TableProm)
    store = SqliteStore(str(tmp_path / "s.db"))
    try:
        with serving(create_app(Controller(store), "s3cret", prometheus="http://prom.test")) as url:
            yield url
    finally:
        store.close()


ROWS = """
return [...document.querySelectorAll(arguments[0] + ' tbody tr')].map(tr => ({
  key: [tr.dataset.vpc ?? tr.dataset.group, tr.dataset.class],
  cells: Object.fromEntries([...tr.querySelectorAll('td[data-field]')].map(
    td => [td.dataset.field, [td.dataset.value, td.textContent, td.classList.contains('bad')]]))
}));
"""


def test_the_class_and_queue_tables_show_what_prometheus_answered(controller: str) -> None:
    with chromium() as driver:
        driver.get(controller + "/dashboard")
        wait_for("the queue table", lambda: driver.execute_script(
            "return !document.getElementById('queues-section').hidden && "
            "document.querySelectorAll('#queues tbody tr').length > 0"), 15)
        classes = driver.execute_script(ROWS, "#classes")
        queues = driver.execute_script(ROWS, "#queues")
        urls = requested_urls(driver)
    assert [r["key"] for r in classes] == [["blue", "bulk"], ["blue", "small"], ["red", "bulk"]]
    blue_bulk, blue_small, red_bulk = (r["cells"] for r in classes)
    assert blue_bulk["mbps"][0] == "32" and blue_bulk["pps"][0] == "2700"
    assert blue_small["mbps"][0] == "1.5" and blue_small["pps"][0] == "900"
    # the VPC's rate drops on each of its rows, marked; none for a VPC without
    assert blue_bulk["rate_drops"][0] == "4" and blue_bulk["rate_drops"][2]
    assert red_bulk["rate_drops"] == ["", red_bulk["rate_drops"][1], False]
    assert red_bulk["mbps"][0] == "0" and red_bulk["pps"][0] == ""  # no packets series
    # strict-priority order within a group: small, default, bulk
    assert [r["key"] for r in queues] == [["hosts", "small"], ["hosts", "default"],
                                          ["hosts", "bulk"], ["storage", "bulk"]]
    small, default, bulk, storage = (r["cells"] for r in queues)
    assert bulk["mbps"][0] == "38" and bulk["drops"][0] == "41.5" and bulk["drops"][2]
    assert bulk["backlog_kib"][0] == "1024" and small["backlog_kib"][0] == "1.5"
    assert small["drops"] == ["0", small["drops"][1], False]
    assert default["mbps"][0] == "0" and default["backlog_kib"][0] == ""
    assert storage["drops"][0] == "" and not storage["drops"][2]
    assert foreign(urls, controller) == [], foreign(urls, controller)
