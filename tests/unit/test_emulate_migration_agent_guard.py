"""The agents_unhealthy guard: a dead or unhealthy agent counts at once, a slow one only when it
is slow at two readings in a row (a real HTTP endpoint, no emulator needed)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from crosszone_lab.emulate import control_plane, migration, topology
from crosszone_lab.emulate.migration import EmulatorDriver

ROOT = Path(__file__).resolve().parents[2]


class Endpoint:
    """A metrics endpoint whose answer delay (and status) the test changes between readings."""

    def __init__(self) -> None:
        self.delay, self.status = 0.0, 200
        self.health = {"health": "ok"}  # what the agent last reported through the store
        ep = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(ep.delay)
                self.send_response(ep.status)
                self.end_headers()
                self.wfile.write(b"crosszone_up 1\n")

            def log_message(self, *_a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def addr(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host}:{port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[Endpoint]:
    ep = Endpoint()
    monkeypatch.setattr(migration, "AGENT_TIMEOUT_S", 0.2)
    monkeypatch.setattr(control_plane, "agent_metrics", lambda _gw: ep.addr)
    monkeypatch.setattr(control_plane, "agent_status", lambda _gw: dict(ep.health))
    yield ep
    ep.close()


def _driver() -> tuple[EmulatorDriver, Any, list[str]]:
    p = topology.plan(topology.load(ROOT / "examples" / "migrate.yaml"))
    logged: list[str] = []
    d = EmulatorDriver(type("Dep", (), {"plan": p})(), log=logged.append)
    gw = next(g for g in p.gateways if g.kind == "crosszone")
    return d, gw, logged


def test_one_slow_reading_is_tolerated_two_in_a_row_are_not(endpoint: Endpoint) -> None:
    d, gw, logged = _driver()
    endpoint.delay = 0.6
    assert d._agent_ok(gw), "a first slow answer must not count"
    assert any("slow again" in m for m in logged)
    assert not d._agent_ok(gw), "slow at two readings in a row must count"
    assert not d._agent_ok(gw), "and keeps counting while it stays slow"
    endpoint.delay = 0.0
    assert d._agent_ok(gw)


def test_slow_readings_apart_do_not_add_up(endpoint: Endpoint) -> None:
    d, gw, _ = _driver()
    for delay in (0.6, 0.0, 0.6, 0.0, 0.6):
        endpoint.delay = delay
        assert d._agent_ok(gw), delay


def test_an_endpoint_that_refuses_counts_at_once(
        endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    d, gw, logged = _driver()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
        port = s.getsockname()[1]
        monkeypatch.setattr(control_plane, "agent_metrics", lambda _gw: f"127.0.0.1:{port}")
        assert not d._agent_ok(gw)
    assert any("refused" in m.lower() for m in logged), logged


def test_an_error_status_or_an_unhealthy_report_counts_at_once(endpoint: Endpoint) -> None:
    d, gw, logged = _driver()
    endpoint.status = 500
    assert not d._agent_ok(gw)
    endpoint.status = 200
    endpoint.health["health"] = "degraded"
    assert not d._agent_ok(gw)
    assert any("'degraded'" in m for m in logged), logged


def test_slow_then_dead_counts_at_once(endpoint: Endpoint) -> None:
    d, gw, _ = _driver()
    endpoint.delay = 0.6
    assert d._agent_ok(gw)
    endpoint.delay, endpoint.status = 0.0, 503
    assert not d._agent_ok(gw)
