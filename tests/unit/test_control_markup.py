"""Names and messages are text, never rich markup (issue 26, point 4): a `[/x]` (an unmatched
closing tag) in an intent's key or name, a gateway's name or an agent's status message ended
`crosszone check`, `apply`, `status` and `top --once` with a MarkupError, and `[bold]`
vanished from the output."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crosszone.control import commands, dashboard
from crosszone.control.client import ControllerError
from crosszone.store.sqlite_store import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
HOSTILE = "[/x] [bold]b[/bold] [red]"


class FakeClient:
    """Answers apply, status and dashboard with the documents given; `fail` makes each call
    raise a ControllerError carrying markup."""

    def __init__(self, docs: dict[str, Any], fail: bool = False) -> None:
        self.docs, self.fail = docs, fail

    def _answer(self, what: str) -> dict[str, Any]:
        if self.fail:
            raise ControllerError(f"HTTP 422: pool {HOSTILE} is unknown")
        return self.docs[what]

    def apply(self, text: str, dry_run: bool = False) -> dict[str, Any]:
        return self._answer("apply")

    def status(self) -> dict[str, Any]:
        return self._answer("status")

    def dashboard(self, window: float = 60) -> dict[str, Any]:
        return self._answer("dashboard")


def _run(monkeypatch: pytest.MonkeyPatch, args: list[str], client: FakeClient | None = None
         ) -> tuple[int, str]:
    from crosszone.cli import app

    if client is not None:
        monkeypatch.setattr(commands, "_client", lambda *_a, **_k: client)
    monkeypatch.setenv("COLUMNS", "250")
    r = CliRunner().invoke(app, args)
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception  # a MarkupError, before the fix
    return r.exit_code, re.sub(r"[\s│]+", " ", r.output)


@pytest.mark.parametrize("key", ["[/x]", "[bold]"])
def test_check_prints_the_file_s_words_as_written(monkeypatch, tmp_path: Path, key: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLUSTER.read_text() + f'"{key}": 1\n')
    code, out = _run(monkeypatch, ["check", str(bad)])
    assert code == 2 and f"unknown key '{key}'" in out, out
    code, out = _run(monkeypatch, ["check", str(tmp_path / "[red]missing.yaml")])
    assert code == 2 and "[red]missing.yaml" in out, out
    named = tmp_path / "[bold]ok.yaml"
    named.write_text(CLUSTER.read_text())
    code, out = _run(monkeypatch, ["check", str(named)])
    assert code == 0 and "[bold]ok.yaml: valid" in out, out


def test_apply_prints_names_as_written(monkeypatch) -> None:
    answer = {"revision": 3, "changed": ["core"], "gateways": {
        f"gw-{HOSTILE}": {"put": {"routes4": 2}, "delete": {}}, "gone[/x]": {"removed": True}}}
    code, out = _run(monkeypatch, ["apply", str(CLUSTER)], FakeClient({"apply": answer}))
    assert code == 0, out
    assert f"gw-{HOSTILE} routes4 2 0" in out and "gone[/x] (gateway removed" in out, out
    code, out = _run(monkeypatch, ["apply", str(CLUSTER)], FakeClient({}, fail=True))
    assert code == 2 and f"pool {HOSTILE} is unknown" in out, out


def test_status_prints_names_and_messages_as_written(monkeypatch) -> None:
    doc = {"desired_revision": 7, "gateways": {
        "gw-[/x]": {"health": "rejecting[/x]", "revision": 7, "message": HOSTILE,
                    "counters": {"forwarded": "[/x]"}}}}
    code, out = _run(monkeypatch, ["status"], FakeClient({"status": doc}))
    assert code == 0, out
    assert "gw-[/x] rejecting[/x] 7 yes" in out and HOSTILE in out and "[/x]" in out, out
    code, out = _run(monkeypatch, ["status"], FakeClient({}, fail=True))
    assert code == 2 and HOSTILE in out
    # parts of a report that are not mappings (the store holds anything) are left empty
    doc["gateways"]["gw-[/x]"].update(counters="[/x]", occupancy=[1])
    code, out = _run(monkeypatch, ["status"], FakeClient({"status": doc}))
    assert code == 0 and "gw-[/x] rejecting[/x] 7 yes" in out, out


def test_top_once_prints_names_and_messages_as_written(monkeypatch, tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    store.put(dashboard.MIGRATION_KEY, json.dumps({
        "state": "shifting[/x]", "step": 2, "weight_new": 10,
        "guards": [{"name": "loss[/x]", "value": "[/x]", "limit": 0, "ok": False}]}).encode())
    status = {"desired_revision": 5, "gateways": {
        "gw-[/x]": {"revision": 5, "health": "ok", "message": HOSTILE}}}
    doc = dashboard.snapshot(status, store, None, None, now=lambda: 1000.0)
    doc["series"]["vpc_bits"] = [{"vpc": "blue[/x]", "direction": "to_storage",
                                  "values": [4e9]}]
    doc["series"]["verdicts"] = [{"verdict": "drop[/x]", "reason": "drop_[/x]",
                                  "values": [3.0]}]
    store.close()
    code, out = _run(monkeypatch, ["top", "--once"], FakeClient({"dashboard": doc}))
    assert code == 0, out
    for text in (f"gw-[/x] ok 5 - - - {HOSTILE}", "blue[/x] 4.000", "drop[/x] drop_[/x] 3.0",
                 "migration: shifting[/x]", "guard loss[/x]: [/x]"):
        assert text in out, (text, out)
