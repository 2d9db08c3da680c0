"""The dashboard's data (controller side, a fake Prometheus), its HTTP routes and read policy,
the controller's /metrics, and `crosszone top`'s rendering."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from crosszone.control import dashboard, top
from crosszone.control.api import create_app
from crosszone.control.dashboard_routes import STATIC
from crosszone.control.service import Controller
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import STATUS

AUTH = {"Authorization": "Bearer s3cret"}
T0 = 1_000_000.0
# as the engine writes it (migrate/engine.py): weight_new in percent
MIGRATION = {"state": "shifting", "step": 3, "weight_new": 25,
             "history": [{"t": T0 - 20, "event": "start", "step": 0, "weight_new": 0,
                          "reason": ""},
                         {"t": T0 - 5, "event": "step", "step": 3, "weight_new": 25,
                          "reason": "guards ok"}],
             "guards": [{"name": "loss", "value": 0, "limit": 0, "ok": True},
                        {"name": "bfd", "value": 1, "limit": 0, "ok": False}]}


#: what Prometheus answers where something exports crosszone_queue_* (the emulator's queue
#: exporter): per port group and class, bit/s, drops/s and backlog bytes
QUEUES = {
    "crosszone:queue_bits:rate10s": [({"group": "hosts", "class": "bulk"}, "3.8e7"),
                                     ({"group": "hosts", "class": "small"}, "1.2e6"),
                                     ({"group": "hosts", "class": "default"}, "0")],
    "crosszone:queue_drops:rate10s": [({"group": "hosts", "class": "bulk"}, "41.5"),
                                      ({"group": "hosts", "class": "small"}, "0"),
                                      ({"group": "hosts", "class": "default"}, "0")],
    "crosszone:queue_backlog_bytes:sum": [({"group": "hosts", "class": "bulk"}, "1048576"),
                                          ({"group": "hosts", "class": "small"}, "1514"),
                                          ({"group": "hosts", "class": "default"}, "0")],
}


class FakeProm:
    """Answers the dashboard's queries from tables; `fail` makes every query fail; `queues`
    adds the queue exporter's series."""

    url = "http://prom.test"

    def __init__(self, fail: bool = False, queues: bool = False) -> None:
        self.fail = fail
        self.queues = queues
        self.asked: list[str] = []

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        self.asked.append(expr)
        if self.fail:
            raise dashboard.PrometheusError("prometheus http://prom.test: connection refused")
        if expr == "crosszone:vpc_bits:rate5s":
            return [{"metric": {"vpc": "blue", "direction": "to_storage"},
                     "values": [[end - 2 * step, "8e9"], [end - step, "NaN"], [end, "4e9"]]},
                    {"metric": {"vpc": "blue", "direction": "to_compute"},
                     "values": [[end, "1e9"], [end + step, "9e9"]]}]
        if expr == "crosszone:vpc_packets:rate5s":
            return [{"metric": {"vpc": "blue", "direction": "to_storage"},
                     "values": [[end, "350000"]]}]
        if expr == "crosszone:verdicts:rate5s":
            return [{"metric": {"verdict": "drop", "reason": "drop_vni_unknown"},
                     "values": [[end, "12.5"]]},
                    {"metric": {"verdict": "drop", "reason": "drop_route_miss"},  # never fired
                     "values": [[end - step, "0"], [end, "0"]]}]
        if expr == "crosszone:class_bits:rate5s":
            return [{"metric": {"vpc": "blue", "class": "small"}, "values": [[end, "1.5e6"]]},
                    {"metric": {"vpc": "blue", "class": "bulk"}, "values": [[end, "3.2e7"]]}]
        if expr == "crosszone:class_packets:rate5s":
            return [{"metric": {"vpc": "blue", "class": "small"}, "values": [[end, "900"]]},
                    {"metric": {"vpc": "blue", "class": "bulk"}, "values": [[end, "2700"]]}]
        if expr == "crosszone:rate_drops:rate5s":
            return [{"metric": {"vpc": "blue"}, "values": [[end, "4"]]}]
        if self.queues and expr in QUEUES:
            return [{"metric": m, "values": [[end - step, "7"], [end, v]]} for m, v in QUEUES[expr]]
        return []

    def instant(self, expr: str) -> list[dict[str, Any]]:
        self.asked.append(expr)
        table = {
            "crosszone_bgp_session_up": [
                ({"gateway": "gw-a", "peer": "10.0.0.1"}, "1"),
                ({"gateway": "gw-a", "peer": "10.0.1.1"}, "0")],
            "crosszone_bfd_session_up": [({"gateway": "gw-a", "peer": "10.0.0.1"}, "1")],
            "crosszone_fastpath_attached": [({"gateway": "gw-a", "device": "c0"}, "1"),
                                            ({"gateway": "gw-a", "device": "s0"}, "1")],
            'up{role="agent"}': [({"gateway": "gw-a"}, "1"), ({"gateway": "gw-b"}, "0")],
        }
        return [{"metric": m, "value": [T0, v]} for m, v in table[expr]]


@pytest.fixture
def store(tmp_path: Path) -> SqliteStore:
    s = SqliteStore(str(tmp_path / "s.db"), poll_s=0.001)
    # two puts: the store (and so the controller's desired revision) is at revision 2
    s.put(STATUS + "gw-a", json.dumps({"revision": 2, "health": "ok", "message": ""}).encode())
    s.put(STATUS + "gw-b", json.dumps({"revision": 1, "health": "degraded",
                                       "message": "store unreachable"}).encode())
    return s


def _status() -> dict[str, Any]:
    # gw-a reports a revision past the intent's (the store moved on with other writes): in sync
    return {"desired_revision": 5, "gateways": {
        "gw-a": {"revision": 6, "health": "ok"},
        "gw-b": {"revision": 3, "health": "degraded", "message": "store unreachable"}}}


def test_align_puts_each_value_at_its_step_and_drops_nan_and_outliers() -> None:
    res = [{"metric": {"vpc": "v", "direction": "d", "other": "x"},
            "values": [[100, "1"], [104, "NaN"], [106, "+Inf"], [108, "3"], [112, "9"]]}]
    out = dashboard.align(res, ("vpc", "direction"), start=100, step=2, points=5)
    assert out == [{"vpc": "v", "direction": "d", "values": [1.0, None, None, None, 3.0]}]


def test_snapshot_without_prometheus_still_shows_gateways_and_migration(store) -> None:
    store.put(dashboard.MIGRATION_KEY, json.dumps(MIGRATION).encode())
    doc = dashboard.snapshot(_status(), store, None, None, now=lambda: T0)
    assert doc["prometheus"]["ok"] is False
    assert "--prometheus" in doc["prometheus"]["error"]
    assert [g["name"] for g in doc["gateways"]] == ["gw-a", "gw-b"]
    assert doc["gateways"][0]["in_sync"] is True and doc["gateways"][1]["in_sync"] is False
    assert doc["gateways"][1]["bgp"] is None
    assert doc["migration"]["step"] == 3 and doc["series"]["vpc_bits"] == []


def test_snapshot_with_prometheus(store) -> None:
    prom = FakeProm()
    doc = dashboard.snapshot(_status(), store, prom, None, window=60, step=2,  # type: ignore[arg-type]
                             now=lambda: T0 + 1.3)
    assert doc["prometheus"]["ok"] and doc["time"] == T0  # floored to the step
    s = doc["series"]
    assert s["start"] == T0 - 60 and s["points"] == 31
    bits = {(x["vpc"], x["direction"]): x["values"] for x in s["vpc_bits"]}
    assert bits[("blue", "to_storage")][-3:] == [8e9, None, 4e9]
    assert bits[("blue", "to_compute")][-1] == 1e9  # the point after `end` is left out
    assert dashboard.latest(s["verdicts"]) == [
        {"verdict": "drop", "reason": "drop_vni_unknown", "value": 12.5}]
    a, b = doc["gateways"]
    assert a["bgp"] == {"up": 1, "total": 2, "peers": {"10.0.0.1": True, "10.0.1.1": False}}
    assert a["bfd"]["up"] == 1 and a["attached"] == {"c0": True, "s0": True}
    assert a["scraped"] is True and b["scraped"] is False and b["bgp"] is None
    assert doc["migration"] == {"state": "none"}


def test_snapshot_carries_the_queues_per_group_and_class(store) -> None:
    doc = dashboard.snapshot(_status(), store, FakeProm(queues=True), None,  # type: ignore[arg-type]
                             window=60, step=2, now=lambda: T0)
    s = doc["series"]
    bits = {(x["group"], x["class"]): x["values"] for x in s["queue_bits"]}
    assert set(bits) == {("hosts", "bulk"), ("hosts", "small"), ("hosts", "default")}
    assert bits[("hosts", "bulk")][-2:] == [7.0, 3.8e7]
    assert dashboard.latest(s["queue_drops"])[0] == {"group": "hosts", "class": "bulk",
                                                     "value": 41.5}
    backlog = {(x["group"], x["class"]): x["value"] for x in dashboard.latest(s["queue_backlog"])}
    assert backlog[("hosts", "bulk")] == 1048576.0 and backlog[("hosts", "default")] == 0.0


def test_snapshot_without_queue_series_has_an_empty_queue_section(store) -> None:
    prom = FakeProm()
    doc = dashboard.snapshot(_status(), store, prom, None, now=lambda: T0)  # type: ignore[arg-type]
    assert "crosszone:queue_bits:rate10s" in prom.asked  # asked, nothing there
    assert doc["prometheus"]["ok"]
    assert doc["series"]["queue_bits"] == doc["series"]["queue_drops"] == []
    assert doc["series"]["queue_backlog"] == []
    failed = dashboard.snapshot(_status(), store, FakeProm(fail=True, queues=True), None,  # type: ignore[arg-type]
                                now=lambda: T0)
    assert failed["series"]["queue_bits"] == []


def test_snapshot_when_prometheus_fails(store) -> None:
    doc = dashboard.snapshot(_status(), store, FakeProm(fail=True), None,  # type: ignore[arg-type]
                             now=lambda: T0)
    assert doc["prometheus"]["ok"] is False and "refused" in doc["prometheus"]["error"]
    assert doc["series"]["vpc_bits"] == [] and len(doc["gateways"]) == 2


def test_window_is_bounded(store) -> None:
    doc = dashboard.snapshot(_status(), store, None, None, window=10**9, step=2,
                             now=lambda: T0)
    assert doc["series"]["points"] == dashboard.MAX_WINDOW // 2 + 1


@pytest.mark.parametrize("raw,want", [(b"not json", "unreadable"), (b"[1, 2]", "unreadable"),
                                      (json.dumps(MIGRATION).encode(), "shifting")])
def test_migration_record(store, raw: bytes, want: str) -> None:
    store.put(dashboard.MIGRATION_KEY, raw)
    assert dashboard.migration(store)["state"] == want


def test_charts_lists_only_svg_files(tmp_path: Path) -> None:
    (tmp_path / "plan.svg").write_text("<svg/>")
    (tmp_path / "plan.png").write_bytes(b"png")
    (tmp_path / "dir.svg").mkdir()
    assert dashboard.charts(tmp_path) == ["plan.svg"]
    assert dashboard.charts(tmp_path / "missing") == [] and dashboard.charts(None) == []


# ---- HTTP ------------------------------------------------------------------------------------

def _api(store: SqliteStore, tmp_path: Path, open_reads: bool = True) -> TestClient:
    (tmp_path / "charts").mkdir(exist_ok=True)
    (tmp_path / "charts" / "simulate.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    (tmp_path / "secret.svg").write_text("<svg/>")
    return TestClient(create_app(Controller(store), "s3cret", open_reads=open_reads,
                                 charts_dir=tmp_path / "charts"))


def test_dashboard_routes(store, tmp_path: Path) -> None:
    store.put(dashboard.MIGRATION_KEY, json.dumps(MIGRATION).encode())
    api = _api(store, tmp_path)
    page = api.get("/dashboard")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert api.get("/dashboard/static/dashboard.js").headers["content-type"].startswith(
        "text/javascript")
    assert api.get("/dashboard/charts/simulate.svg").status_code == 200
    for bad in ("/dashboard/static/..%2Fapi.py", "/dashboard/static/dashboard.html",
                "/dashboard/static/uPlot.LICENSE", "/dashboard/charts/..%2Fsecret.svg",
                "/dashboard/charts/.hidden.svg", "/dashboard/charts/missing.svg"):
        assert api.get(bad).status_code == 404, bad
    assert api.get("/v1/migration").json()["step"] == 3
    doc = api.get("/v1/dashboard", params={"window": 60}).json()
    assert doc["charts"] == ["simulate.svg"] and doc["migration"]["state"] == "shifting"
    assert api.get("/v1/dashboard", params={"step": 0.01}).status_code == 422


def test_reads_can_need_the_token(store, tmp_path: Path) -> None:
    api = _api(store, tmp_path, open_reads=False)
    for path in ("/v1/status", "/v1/dashboard", "/v1/migration", "/metrics", "/v1/intent",
                 "/dashboard/charts/simulate.svg", "/openapi.json"):
        assert api.get(path).status_code == 401, path
        assert api.get(path, headers=AUTH).status_code in (200, 422), path
    for path in ("/healthz", "/dashboard", "/dashboard/static/dashboard.js"):
        assert api.get(path).status_code == 200, path
    assert api.post("/v1/intent", content="x").status_code == 401  # writes: always
    open_api = _api(store, tmp_path)
    assert open_api.get("/v1/dashboard").status_code == 200
    assert open_api.post("/v1/intent", content="x").status_code == 401


def test_controller_metrics(store, tmp_path: Path) -> None:
    store.put(dashboard.MIGRATION_KEY, json.dumps(MIGRATION).encode())
    rev = store.revision() + 1  # gw-a reports the revision its own report is written at
    store.put(STATUS + "gw-a", json.dumps({"revision": rev, "health": "ok"}).encode())
    text = _api(store, tmp_path).get("/metrics").text
    assert f"\ncrosszone_desired_revision {rev}.0\n" in text
    assert f'crosszone_gateway_revision{{gateway="gw-a"}} {rev}.0' in text
    assert 'crosszone_gateway_health{gateway="gw-b",health="degraded"} 1.0' in text
    assert 'crosszone_gateway_in_sync{gateway="gw-b"} 0.0' in text
    assert 'crosszone_gateway_in_sync{gateway="gw-a"} 1.0' in text
    assert "crosszone_migration_step 3.0" in text
    assert "crosszone_migration_weight_new_ratio 0.25" in text
    assert 'crosszone_migration_guard_ok{guard="bfd"} 0.0' in text
    store.put(dashboard.MIGRATION_KEY, b'{"state": "none"}')
    assert "crosszone_migration_step" not in _api(store, tmp_path).get("/metrics").text


# ---- the shipped page ------------------------------------------------------------------------

class _Refs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [v for k, v in attrs if k in ("src", "href") and v]


def test_page_loads_only_shipped_assets() -> None:
    parser = _Refs()
    parser.feed((STATIC / "dashboard.html").read_text())
    assert parser.refs, "the page references its scripts and styles"
    for ref in parser.refs:
        if ref == "data:,":
            continue  # the empty favicon: keeps the browser from asking for /favicon.ico
        assert ref.startswith("/dashboard/static/"), ref
        assert (STATIC / ref.removeprefix("/dashboard/static/")).is_file(), ref
    script = (STATIC / "dashboard.js").read_text()
    assert not re.search(r"https?://", script) and "fetch(`/v1/dashboard" in script
    assert "innerHTML" not in script  # data goes in with textContent only


def test_vendored_chart_library_is_the_recorded_release() -> None:
    import hashlib

    notes = (STATIC / "VENDOR.md").read_text()
    for name in ("uPlot.iife.min.js", "uPlot.min.css"):
        digest = hashlib.sha256((STATIC / name).read_bytes()).hexdigest()
        assert f"{digest}  {name}" in notes, f"{name} differs from the release VENDOR.md names"


# ---- crosszone top ---------------------------------------------------------------------------

def test_top_renders_the_figures(store) -> None:
    store.put(dashboard.MIGRATION_KEY, json.dumps(MIGRATION).encode())
    doc = dashboard.snapshot(_status(), store, FakeProm(), None,  # type: ignore[arg-type]
                             now=lambda: T0)
    console = Console(record=True, width=160)
    console.print(top.render(doc))
    out = console.export_text()
    out = re.sub(r"[\s│]+", " ", out)  # cells apart by one space
    assert "blue 4.000 1.000 350,000 -" in out
    assert "drop drop_vni_unknown 12.5" in out
    # per traffic class: which class carries what, and the VPC's rate drops
    assert "blue bulk 32.000 2,700 4.0" in out and "blue small 1.500 900 4.0" in out
    assert "gw-a ok 6 1/2 up 1/1 up attached (c0, s0)" in out
    assert "3 (behind)" in out and "step 3" in out and "25 %" in out and "TRIPPED" in out


def _screen(doc: dict[str, Any]) -> str:
    console = Console(record=True, width=160)
    console.print(top.render(doc))
    return re.sub(r"[\s│┃]+", " ", console.export_text())  # cells apart by one space


def test_top_renders_the_queues_per_class(store) -> None:
    doc = dashboard.snapshot(_status(), store, FakeProm(queues=True), None,  # type: ignore[arg-type]
                             now=lambda: T0)
    out = _screen(doc)
    assert "queues per class, now" in out
    assert "group class Mbit/s drops/s backlog KiB" in out
    # in the order the queues serve them: small, default, bulk
    assert "hosts small 1.200 0.0 1.5 hosts default 0.000 0.0 0.0 hosts bulk 38.000 41.5 1,024.0" \
        in out
    assert top.queue_rows(doc)[("hosts", "bulk")] == {"mbps": 38.0, "drops": 41.5,
                                                      "backlog_kib": 1024.0}


def test_top_leaves_the_queue_table_out_without_queue_series(store) -> None:
    doc = dashboard.snapshot(_status(), store, FakeProm(), None,  # type: ignore[arg-type]
                             now=lambda: T0)
    assert top.queue_table(doc) is None
    assert "queues per class" not in _screen(doc)
    assert "per traffic class, now" in _screen(doc)


def test_top_escapes_queue_names_from_prometheus(store) -> None:
    """Group and class come from whatever exports the series (a switch): markup in them is
    shown, never read."""
    doc = dashboard.snapshot(_status(), store, FakeProm(), None,  # type: ignore[arg-type]
                             now=lambda: T0)
    doc["series"]["queue_bits"] = [{"group": "[red]sw1", "class": "[/]x", "values": [8e6]}]
    assert "[red]sw1 [/]x 8.000" in _screen(doc)


def test_the_page_shows_the_queue_table_only_with_queue_series() -> None:
    page = (STATIC / "dashboard.html").read_text()
    section = page[page.index('<section id="queues-section"'):]
    section = section[:section.index("</section>")]
    assert " hidden>" in section.splitlines()[0] and '<table id="queues">' in section
    script = (STATIC / "dashboard.js").read_text()
    body = script[script.index("function drawQueues"):]
    body = body[:body.index("\n}\n")]
    for key in ("queue_bits", "queue_drops", "queue_backlog"):  # the series pivot() reads
        assert f'["{key}", ' in body
    assert 'getElementById("queues-section").hidden = sorted.length === 0' in body
    assert "drawQueues(doc);" in script


@pytest.mark.parametrize("record", [
    {"state": "shifting", "step": "two", "weight_new": "half", "guards": 7, "history": "x"},
    {"state": "shifting", "step": True, "weight_new": 9.0, "guards": [1, {"ok": True}]},
])
def test_an_odd_migration_record_breaks_nothing(store, tmp_path: Path, record) -> None:
    store.put(dashboard.MIGRATION_KEY, json.dumps(record).encode())
    api = _api(store, tmp_path)
    text = api.get("/metrics").text
    assert api.get("/metrics").status_code == 200 and "crosszone_migration_step" not in text
    doc = api.get("/v1/dashboard").json()
    assert doc["migration"]["state"] == "shifting"
    console = Console(record=True, width=160)
    console.print(top.render(doc))
    assert "migration: shifting" in console.export_text()


def test_migration_route_steps_aside_for_the_engines_own(store) -> None:
    from fastapi import FastAPI

    from crosszone.control.dashboard_routes import add_dashboard

    app = FastAPI()

    @app.get("/v1/migration")
    def engine_view() -> dict[str, Any]:
        return {"state": "engine"}

    add_dashboard(app, Controller(store), None, None)
    assert [getattr(r, "path", "") for r in app.routes].count("/v1/migration") == 1
    assert TestClient(app).get("/v1/migration").json() == {"state": "engine"}


@pytest.mark.parametrize("applied,desired,want", [(5, 5, True), (9, 5, True), (4, 5, False),
                                                  (None, 5, False), ("5", 5, False),
                                                  (5, None, False)])
def test_in_sync(applied, desired, want) -> None:
    assert dashboard.in_sync(applied, desired) is want


def test_a_metric_that_is_no_number_is_skipped_and_counted(store, tmp_path: Path) -> None:
    """Issue 26, point 6: a 401-digit `revision` in a gateway's report or `step` in the
    migration record made float() overflow and /metrics answer 500. Such a sample is left
    out and counted; the rest of the scrape is served."""
    huge = 10 ** 400
    store.put(STATUS + "gw-a", json.dumps({"revision": huge, "health": "ok"}).encode())
    store.put(dashboard.MIGRATION_KEY, json.dumps(
        {**MIGRATION, "step": huge, "weight_new": "half"}).encode())
    api = _api(store, tmp_path)
    r = api.get("/metrics")
    assert r.status_code == 200, r.text
    text = r.text
    assert 'crosszone_gateway_revision{gateway="gw-a"}' not in text
    assert 'crosszone_gateway_revision{gateway="gw-b"} 1.0' in text
    assert 'crosszone_gateway_health{gateway="gw-a",health="ok"} 1.0' in text
    assert "crosszone_migration_step " not in text
    assert "crosszone_migration_weight_new_ratio " not in text
    assert 'crosszone_migration_guard_ok{guard="bfd"} 0.0' in text
    assert "crosszone_metrics_skipped_samples_total 3.0" in text  # revision, step, weight
    assert "crosszone_metrics_skipped_samples_total 6.0" in api.get("/metrics").text


@pytest.mark.parametrize("percent,ratio,shown", [(1, "0.01", "1 %"), (50, "0.5", "50 %"),
                                                 (100, "1.0", "100 %"), (0, "0.0", "0 %")])
def test_weight_units_agree(store, tmp_path: Path, percent: int, ratio: str, shown: str
                            ) -> None:
    """Issue 26, point 7: the record's weight_new is in percent (the engine's unit). At 50 %
    the metric said 50.0 (documented 0..1), the page would have shown 5,000 % and `top` 100 %
    for any step at 1 % or more."""
    store.put(dashboard.MIGRATION_KEY, json.dumps(
        {"state": "shifting", "step": 1, "weight_new": percent}).encode())
    api = _api(store, tmp_path)
    assert f"crosszone_migration_weight_new_ratio {ratio}\n" in api.get("/metrics").text
    console = Console(record=True, width=160)
    console.print(top.render(api.get("/v1/dashboard").json()))
    line = next(x for x in console.export_text().splitlines() if x.startswith("migration"))
    assert line.endswith(f"] {shown} on the new gateways"), line
    assert line.count("#") == round(percent / 5), line  # the 20-character bar
    script = (STATIC / "dashboard.js").read_text()
    assert "weight_new ?? 0) * 100" not in script and "fmt(m.weight_new ?? 0, 0)} %" in script


# ---- issue 26, point 8: the dashboard under hostile input ------------------------------------

def test_a_window_that_is_no_number_is_422(store, tmp_path: Path) -> None:
    api = _api(store, tmp_path)
    for window in ("nan", "NaN", "-nan", "inf", "-inf"):
        r = api.get("/v1/dashboard", params={"window": window})
        assert r.status_code == 422 and "window" in r.json()["detail"], (window, r.text)
    for window in ("-5", "1e300"):  # bounded to 10 steps .. MAX_WINDOW, as before
        assert api.get("/v1/dashboard", params={"window": window}).status_code == 200, window
    with pytest.raises(ValueError, match="finite"):
        dashboard.snapshot(_status(), store, None, None, window=float("nan"))


class SlowProm(FakeProm):
    """A FakeProm that takes a moment per query and counts them across threads."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.lock = threading.Lock()

    def range(self, expr, start, end, step):  # type: ignore[override]
        import time

        time.sleep(0.05)
        with self.lock:
            return super().range(expr, start, end, step)

    def instant(self, expr):  # type: ignore[override]
        import time

        time.sleep(0.05)
        with self.lock:
            return super().instant(expr)


def test_open_dashboards_share_prometheus_answers(store) -> None:
    """Twenty dashboards polling at once ask Prometheus once per step (a query per series and
    gauge), not twenty times; the next step asks again."""
    from concurrent.futures import ThreadPoolExecutor

    prom, shared = SlowProm(), dashboard.SharedAnswers()

    def one(t: float) -> dict[str, Any]:
        return dashboard.snapshot(_status(), store, prom, None, now=lambda: t,  # type: ignore[arg-type]
                                  shared=shared)
    with ThreadPoolExecutor(20) as pool:
        docs = list(pool.map(one, [T0 + 0.1 * (i % 10) for i in range(20)]))  # one 2 s step
    asks = len(dashboard.SERIES) + len(dashboard.GAUGES)  # one query each
    assert len(prom.asked) == asks and all(d["prometheus"]["ok"] for d in docs)
    assert len({json.dumps(d["series"]) for d in docs}) == 1
    one(T0 + 2)  # the next step
    assert len(prom.asked) == 2 * asks and len(shared._answers) == 1  # the old step dropped
    # an error is shared too, until the next step
    failing, shared = FakeProm(fail=True), dashboard.SharedAnswers()
    for _ in range(5):
        doc = dashboard.snapshot(_status(), store, failing, None,  # type: ignore[arg-type]
                                 now=lambda: T0, shared=shared)
        assert doc["prometheus"]["ok"] is False and "refused" in doc["prometheus"]["error"]
    assert len(failing.asked) <= asks


def test_the_route_shares_prometheus_answers(store, tmp_path: Path, monkeypatch) -> None:
    import asyncio

    import httpx

    prom = SlowProm()
    monkeypatch.setattr(dashboard, "PrometheusReader", lambda url: prom)
    app = create_app(Controller(store), "s3cret", prometheus="http://prom.test")

    async def go() -> list[int]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://ctl", timeout=30) as c:
            rs = await asyncio.gather(*(c.get("/v1/dashboard") for _ in range(20)))
            return [r.status_code for r in rs]
    assert asyncio.run(go()) == [200] * 20
    asks = len(dashboard.SERIES) + len(dashboard.GAUGES)  # one query each
    assert len(prom.asked) in (asks, 2 * asks)  # twice: the requests straddled a 2 s step


@pytest.mark.parametrize("answer,why", [
    ([], "not an object"),
    ({"status": "success"}, "data.result"),
    ({"status": "success", "data": {"result": {"a": 1}}}, "data.result"),
    ({"status": "success", "data": {"result": [5]}}, "data.result"),
    ({"status": "success", "data": {"result": [{"metric": {}, "values": [["soon", "1"]]}]}},
     "not a number"),
    ({"status": "success", "data": {"result": [{"metric": {}, "values": [[None, "1"]]}]}},
     "not a number"),
    ({"status": "success", "data": {"result": [{"metric": {}, "values": [["1e999", "1"]]}]}},
     "no time"),
    ({"status": "success", "data": {"result": [{"metric": {}, "values": [[T0, "x"]]}]}},
     "not a number"),
    ({"status": "success", "data": {"result": [{"metric": {}, "values": "x"}]}}, "pairs"),
    ({"status": "success", "data": {"result": [{"metric": {}, "value": [1]}]}}, "pair"),
    ({"status": "error", "error": "bad query"}, "bad query"),
])
def test_an_odd_prometheus_answer_is_an_error_not_a_500(store, answer, why: str) -> None:
    """Prometheus answering `[]`, a success without data, or a sample time that is no number
    used to fail the whole snapshot (500); now the rates are missing and the page says why."""
    import httpx

    prom = dashboard.PrometheusReader("http://prom.test")
    prom._http = httpx.Client(base_url="http://prom.test", transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=answer)))
    doc = dashboard.snapshot(_status(), store, prom, None, now=lambda: T0)
    assert doc["prometheus"]["ok"] is False and why in doc["prometheus"]["error"], doc
    assert doc["series"]["vpc_bits"] == [] and len(doc["gateways"]) == 2


def test_a_symlink_in_the_charts_directory_is_not_followed(store, tmp_path: Path) -> None:
    api = _api(store, tmp_path)
    (tmp_path / "charts" / "link.svg").symlink_to(tmp_path / "secret.svg")
    (tmp_path / "charts" / "dir.svg").symlink_to(tmp_path / "charts")
    assert api.get("/dashboard/charts/link.svg").status_code == 404
    assert api.get("/dashboard/charts/simulate.svg").status_code == 200
    assert dashboard.charts(tmp_path / "charts") == ["simulate.svg"]
    assert api.get("/v1/dashboard").json()["charts"] == ["simulate.svg"]


def test_charts_are_fetched_with_the_token() -> None:
    """With `--reads token` an <img src> request carries no token, so the charts never
    showed: the page fetches them like its data and shows them from blob: URLs (allowed by
    the policy, for images only)."""
    from crosszone.control.dashboard_routes import CSP

    script = (STATIC / "dashboard.js").read_text()
    body = script[script.index("async function drawCharts"):]
    body = body[:body.index("\n}\n")]
    assert "fetch(`/dashboard/charts/" in body and "headers: authHeaders()" in body
    assert "URL.createObjectURL" in body and "src: `/dashboard/charts" not in body
    assert "img-src 'self' data: blob:;" in CSP and "connect-src 'self';" in CSP
