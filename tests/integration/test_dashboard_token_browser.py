"""The dashboard in a real browser against a controller whose reads need the token (issue 26,
point 8): the page asks for the token, then shows the data and the plan chart, which it
fetches with the token (an <img src> request cannot carry it, so the chart never showed).
The controller runs in this process on 127.0.0.1 (no emulation needed)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app_server import serving
from crosszone.control.api import create_app
from crosszone.control.service import Controller
from crosszone.store.sqlite_store import SqliteStore

from browser import chromium, foreign, requested_urls, wait_for

TOKEN = "s3cret"
SVG = ('<svg xmlns="http://www.w3.org/2000/svg" width="40" height="30">'
       '<rect width="40" height="30" fill="#2f7ed8"/></svg>')


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[str]:
    """A controller with `--reads token` and a charts directory; its URL."""
    charts = tmp_path / "charts"
    charts.mkdir()
    (charts / "plan.svg").write_text(SVG)
    (tmp_path / "secret.svg").write_text(SVG)
    (charts / "link.svg").symlink_to(tmp_path / "secret.svg")  # not served, not listed
    store = SqliteStore(str(tmp_path / "s.db"))
    app = create_app(Controller(store), TOKEN, open_reads=False, charts_dir=charts)
    try:
        with serving(app) as url:
            yield url
    finally:
        store.close()


def test_charts_show_when_reads_need_the_token(controller: str) -> None:
    with chromium() as driver:
        driver.get(controller + "/dashboard")
        wait_for("the token form", lambda: driver.execute_script(
            "return !document.getElementById('login').hidden"), 10)
        driver.find_element("id", "token").send_keys(TOKEN)
        driver.find_element("css selector", "#login button").click()
        wait_for("the gateways' table after the token", lambda: driver.execute_script(
            "return document.getElementById('login').hidden && "
            "document.body.dataset.updated !== undefined"), 10)
        wait_for("the plan chart", lambda: driver.execute_script(
            "const i = document.querySelector('#charts img[data-name=\"plan.svg\"]');"
            "return i && i.complete && i.naturalWidth === 40 && i.src.startsWith('blob:')"),
            10)
        names = driver.execute_script(
            "return [...document.querySelectorAll('#charts img')].map(i => i.dataset.name)")
        assert names == ["plan.svg"]
        urls = requested_urls(driver)
        assert any(u.endswith("/dashboard/charts/plan.svg") for u in urls)
        assert foreign(urls, controller) == [], foreign(urls, controller)
