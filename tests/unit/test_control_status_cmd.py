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
