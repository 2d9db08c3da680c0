"""Progress of long commands goes to stderr, and with --json stdout carries only JSON: the
Progress helper itself, `bench simulate --json`, and `apply --json` and `top --once` against a
real controller on loopback."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from app_server import serving
from crosszone.control.api import create_app
from crosszone.control.service import Controller
from crosszone.progress import Progress
from crosszone.store.sqlite_store import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
CROSSZONE = [sys.executable, "-m", "crosszone.cli"]


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, force_terminal=terminal, width=200, color_system=None), buf


def test_steps_and_outcome_are_lines_in_a_log() -> None:
    console, buf = _console(terminal=False)
    ticks = iter([0.0, 0.0, 1.5, 3.25])
    with Progress("emulate up", console=console, clock=lambda: next(ticks)) as p:
        p.step("building [12] namespaces")
    assert p.steps == 1
    assert buf.getvalue().splitlines() == ["emulate up (  1.5 s) building [12] namespaces",
                                           "emulate up (  3.2 s) done"]


def test_a_failure_is_said() -> None:
    console, buf = _console(terminal=False)
    with pytest.raises(RuntimeError), Progress("apply", console=console) as p:
        p.step("sending")
        raise RuntimeError("refused")
    assert buf.getvalue().splitlines()[-1].endswith("failed")


def test_on_a_terminal_a_spinner_runs_beside_the_lines() -> None:
    console, buf = _console(terminal=True)
    with Progress("bench control", console=console) as p:
        assert p._status is not None  # the spinner
        p.step("sqlite store")
        time.sleep(0.2)
    assert "bench control" in buf.getvalue() and "sqlite store" in buf.getvalue()


def test_markup_in_a_step_is_text_on_a_terminal_too() -> None:
    """Issue 26, point 4: `crosszone apply '[/x].yaml'` on a terminal: the spinner's text was
    read as markup (MarkupError)."""
    console, buf = _console(terminal=True)
    with Progress("apply [/x]", console=console) as p:
        p.step("validating /tmp/[/x][bold].yaml")
        time.sleep(0.2)
    assert "validating /tmp/[/x][bold].yaml" in buf.getvalue()


def _run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CROSSZONE, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def _json_lines(stdout: str) -> list[dict]:
    lines = stdout.splitlines()
    assert lines, "no output"
    return [json.loads(line) for line in lines]  # every line is JSON, nothing else


def test_bench_json_keeps_progress_off_stdout() -> None:
    out = _run("bench", "simulate", "--servers", "20", "--duration", "10min", "--json")
    assert out.returncode == 0, out.stderr
    rows = _json_lines(out.stdout)
    assert len(rows) == 2 and all(r["servers"] == 20 for r in rows)
    assert "bench simulate" in out.stderr and "simulating 20 servers" in out.stderr
    assert out.stderr.rstrip().endswith("done")


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real controller over HTTP on a free loopback port, in a thread."""
    store = SqliteStore(str(tmp_path / "s.db"), poll_s=0.001)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with serving(create_app(Controller(store), "s3cret"), start_timeout=10) as url:
        yield url, token


def test_apply_json_and_top(controller) -> None:
    url, token = controller
    out = _run("apply", str(CLUSTER), "--controller", url, "--token-file", str(token), "--json")
    assert out.returncode == 0, out.stderr
    (result,) = _json_lines(out.stdout)
    assert result["revision"] >= 1 and "gw-a" in result["gateways"]
    assert "apply" in out.stderr and f"sending it to {url}" in out.stderr
    top = _run("top", "--once", "--controller", url)
    assert top.returncode == 0, top.stderr
    assert "gw-a" in top.stdout and "unknown" in top.stdout  # no agent reported yet
    assert "no rates: no Prometheus configured" in top.stdout
    bad = _run("apply", str(CLUSTER), "--controller", url, "--json")  # no token
    assert bad.returncode == 2 and bad.stdout == "" and "401" in bad.stderr


def test_bench_emitters_print_the_line_and_name_it(capsys) -> None:
    from crosszone_lab.bench.commands import _emitter, _line_emitter, _what

    assert _what('{"kind": "crosszone", "event": "link_down", "loss": 3}') == \
        "crosszone link_down"
    assert _what("not json") == _what("[1]") == _what("{}") == "a result"
    console, buf = _console(terminal=False)
    with Progress("bench x", console=console) as p:
        _emitter(p)({"scenario": "ipv4", "pps": 1})
        _line_emitter(p)('{"row": "floor"}')
    assert capsys.readouterr().out.splitlines() == ['{"scenario": "ipv4", "pps": 1}',
                                                    '{"row": "floor"}']
    assert "measured ipv4" in buf.getvalue() and "measured floor" in buf.getvalue()
