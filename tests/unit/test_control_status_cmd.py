"""`crosszone status`: a gateway is in sync at or after the desired revision (an agent reports
the store revision it has read up to, which other writes move past the intent's own)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from crosszone.control import commands


class FakeClient:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def status(self) -> dict[str, Any]:
        return self.doc


def _rows(monkeypatch: pytest.MonkeyPatch, doc: dict[str, Any]) -> dict[str, str]:
    from crosszone.cli import app

    monkeypatch.setattr(commands, "_client", lambda *_a, **_k: FakeClient(doc))
    monkeypatch.setenv("COLUMNS", "200")
    r = CliRunner().invoke(app, ["status"])
    assert r.exit_code == 0, r.output
    out = {}
    for line in r.output.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 4 and cells[1].startswith("gw"):
            out[cells[1]] = cells[4]  # gateway -> "in sync"
    return out


def test_in_sync_at_or_after_the_desired_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = {"desired_revision": 7, "gateways": {
        "gw-ahead": {"health": "ok", "revision": 12},
        "gw-at": {"health": "ok", "revision": 7},
        "gw-behind": {"health": "ok", "revision": 6},
        "gw-none": {"health": "unknown", "revision": None},
        "gw-junk": {"health": "unreadable", "revision": "7"},
    }}
    assert _rows(monkeypatch, doc) == {"gw-ahead": "yes", "gw-at": "yes", "gw-behind": "no",
                                       "gw-none": "no", "gw-junk": "no"}


def test_status_sends_the_token(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Issue 26, point 5: `crosszone status` sent no token even with CROSSZONE_TOKEN set, so a
    `--reads token` controller always answered 401. It reads the token as apply and top do."""
    from crosszone.cli import app

    given: list[str] = []

    def client(url: str, token: str, ca_cert=None) -> FakeClient:
        given.append(token)
        return FakeClient({"desired_revision": 1, "gateways": {}})
    monkeypatch.setattr(commands, "_client", client)
    r = CliRunner().invoke(app, ["status"], env={"CROSSZONE_TOKEN": "s3cret"})
    assert r.exit_code == 0, r.output
    f = tmp_path / "token"
    f.write_text("from-file\n")
    r = CliRunner().invoke(app, ["status", "--token-file", str(f)], env={"CROSSZONE_TOKEN": ""})
    assert r.exit_code == 0, r.output
    assert given == ["s3cret", "from-file"]
    r = CliRunner().invoke(app, ["status", "--token", "abc"])
    assert r.exit_code == 2 and "CROSSZONE_TOKEN" in r.output


def test_status_authenticates_to_a_controller_whose_reads_need_the_token(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: the real client against the API with `--reads token` (in process)."""
    import httpx
    from fastapi.testclient import TestClient

    from crosszone.cli import app
    from crosszone.control.api import create_app
    from crosszone.control.client import Client
    from crosszone.control.service import Controller
    from crosszone.store.sqlite_store import SqliteStore

    api = TestClient(create_app(Controller(SqliteStore(str(tmp_path / "s.db"))), "s3cret",
                                open_reads=False))

    def client(url: str, token: str, ca_cert=None) -> Client:
        c = Client(url, token)
        c._http = httpx.Client(transport=api._transport, base_url="http://testserver",
                               headers=c._http.headers)
        return c
    monkeypatch.setattr(commands, "_client", client)
    r = CliRunner().invoke(app, ["status"], env={"CROSSZONE_TOKEN": ""})
    assert r.exit_code == 2 and "HTTP 401" in r.output
    r = CliRunner().invoke(app, ["status"], env={"CROSSZONE_TOKEN": "s3cret"})
    assert r.exit_code == 0 and "desired revision 0" in r.output, r.output
