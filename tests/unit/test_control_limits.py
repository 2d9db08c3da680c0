"""The controller's limits (issue 12, findings 4-6): the token is checked and the body bounded
before the body is read, heavy work runs off the event loop, the token never comes from argv,
no page loads anything from another host, and the controller serves https when given a
certificate."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from crosszone.control.api import DEFAULT_MAX_BODY, create_app
from crosszone.control.client import Client
from crosszone.control.service import Controller
from crosszone.store.sqlite_store import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
TOKEN = "s3cret"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Counted:
    """A streaming request body of `total` bytes that records how much was pulled from it."""

    def __init__(self, total: int, chunk: int = 1 << 16) -> None:
        self.total, self.chunk, self.sent = total, chunk, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while self.sent < self.total:
            n = min(self.chunk, self.total - self.sent)
            self.sent += n
            yield b"x" * n


def _call(app, method: str, path: str, **kw) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://ctl") as c:
            return await c.request(method, path, **kw)
    return asyncio.run(go())


@pytest.fixture
def ctl(tmp_path: Path) -> Controller:
    return Controller(SqliteStore(str(tmp_path / "s.db"), poll_s=0.001))


def test_unauthenticated_huge_body_is_refused_unread(ctl: Controller) -> None:
    app = create_app(ctl, TOKEN)
    for headers in ({}, {"Authorization": TOKEN}, {"Authorization": "Basic " + TOKEN},
                    {"Authorization": "Bearer wrong"}):
        body = Counted(1 << 30)  # 1 GiB offered; none of it may be read
        r = _call(app, "POST", "/v1/intent", content=body, headers=headers)
        assert r.status_code == 401 and "Bearer" in r.json()["detail"], headers
        assert body.sent == 0, (headers, body.sent)
        r = _call(app, "POST", "/v1/pools/p/prefixes", content=Counted(1 << 20),
                  headers=headers)
        assert r.status_code == 401
    assert ctl.store.revision() == 0


def test_raw_token_is_refused_bearer_accepted(ctl: Controller) -> None:
    app = create_app(ctl, TOKEN)
    text = CLUSTER.read_text()
    assert _call(app, "POST", "/v1/intent", content=text,
                 headers={"Authorization": TOKEN}).status_code == 401
    assert ctl.store.revision() == 0
    assert _call(app, "POST", "/v1/intent", content=text,
                 headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200


def test_body_above_the_limit_is_413_without_buffering_it(ctl: Controller) -> None:
    limit = 1 << 20
    app = create_app(ctl, TOKEN, max_body=limit)
    # Declared too big: refused from the header alone.
    body = Counted(8 * limit)
    r = _call(app, "POST", "/v1/intent", content=body,
              headers={**AUTH, "Content-Length": str(8 * limit)})
    assert r.status_code == 413 and "--max-body" in r.json()["detail"]
    assert body.sent == 0
    # Chunked (no length): read only up to the limit, then refused.
    body = Counted(1 << 30)
    r = _call(app, "POST", "/v1/intent", content=body, headers=AUTH)
    assert r.status_code == 413 and body.sent <= limit + body.chunk
    r = _call(app, "POST", "/v1/pools/datasets/prefixes", content=Counted(2 * limit),
              headers=AUTH)
    assert r.status_code == 413
    assert ctl.store.revision() == 0
    # Under the limit: served as before.
    r = _call(app, "POST", "/v1/intent", content=CLUSTER.read_text(), headers=AUTH)
    assert r.status_code == 200 and r.json()["revision"] >= 1
    assert DEFAULT_MAX_BODY >= 64 << 20  # a 1M-route, 100k-host intent is ~26 MB


class GatedController(Controller):
    """Every write first waits (in whatever thread runs it) until the test opens the gate."""

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.entered, self.gate = threading.Event(), threading.Event()
        self.gate_timed_out = False

    def _wait(self) -> None:
        self.entered.set()
        self.gate_timed_out = not self.gate.wait(3)

    def apply(self, text: str, dry_run: bool = False, source: str = "request"):
        self._wait()
        return super().apply(text, dry_run, source)

    def change_prefixes(self, pool, add, remove, dry_run=False):
        self._wait()
        return super().change_prefixes(pool, add, remove, dry_run)


@pytest.mark.parametrize("write", ["dry_run", "prefixes"])
def test_healthz_answers_while_a_write_is_in_progress(tmp_path: Path, write: str) -> None:
    store = SqliteStore(str(tmp_path / "s.db"), poll_s=0.001)
    if write == "prefixes":
        Controller(store).apply(CLUSTER.read_text())
    ctl = GatedController(store)
    app = create_app(ctl, TOKEN)
    done: list[str] = []

    async def go() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://ctl", timeout=30) as c:
            async def the_write() -> httpx.Response:
                if write == "dry_run":
                    r = await c.post("/v1/intent", params={"dry_run": True},
                                     content=CLUSTER.read_text(), headers=AUTH)
                else:
                    r = await c.post("/v1/pools/datasets/prefixes",
                                     json={"add": ["172.29.0.0/16"]}, headers=AUTH)
                done.append("write")
                return r
            task = asyncio.create_task(the_write())
            while not ctl.entered.is_set():  # the write is under way (blocked at the gate)
                await asyncio.sleep(0.001)
            h = await c.get("/healthz")
            assert h.status_code == 200
            done.append("healthz")
            ctl.gate.set()
            assert (await task).status_code == 200
    asyncio.run(go())
    assert done == ["healthz", "write"] and not ctl.gate_timed_out


def test_no_page_references_another_host(ctl: Controller) -> None:
    app = create_app(ctl, TOKEN)
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert _call(app, "GET", path).status_code == 404
    spec = _call(app, "GET", "/openapi.json")
    assert spec.status_code == 200 and "/v1/pools/{pool}/prefixes" in spec.json()["paths"]
    for path in ("/openapi.json", "/healthz", "/v1/status"):
        text = _call(app, "GET", path).text
        assert "http://" not in text and "https://" not in text, path


def test_the_token_never_comes_from_argv(tmp_path: Path) -> None:
    from crosszone.cli import app

    runner = CliRunner()
    # (an unknown store scheme: a controller that took the token would stop there, not serve)
    for cmd in (["controller", "--token", "abc", "--store", "nope://"],
                ["apply", str(CLUSTER), "--token", "abc"]):
        r = runner.invoke(app, cmd, env={"CROSSZONE_TOKEN": ""})
        assert r.exit_code == 2 and "CROSSZONE_TOKEN" in r.output and "--token-file" in r.output
    r = runner.invoke(app, ["controller"], env={"CROSSZONE_TOKEN": ""})
    assert r.exit_code == 2 and "token is required" in r.output
    r = runner.invoke(app, ["controller", "--token-file", str(tmp_path / "none")],
                      env={"CROSSZONE_TOKEN": ""})
    assert r.exit_code == 2 and "--token-file" in r.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_controller_serves_https_with_a_token_file(tmp_path: Path) -> None:
    cert, key, tok = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "token"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    tok.write_text(TOKEN + "\n")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "CROSSZONE_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "crosszone.cli", "controller", "--store",
         f"sqlite://{tmp_path}/state.db", "--listen", f"127.0.0.1:{port}",
         "--token-file", str(tok), "--tls-cert", str(cert), "--tls-key", str(key)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"https://127.0.0.1:{port}"
    ctx = ssl.create_default_context(cafile=str(cert))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/healthz", verify=ctx, timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stdout.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "controller did not start"
                time.sleep(0.1)
        client = Client(url, TOKEN, verify=str(cert))
        assert client.apply(CLUSTER.read_text())["revision"] >= 1
        assert client.status()["desired_revision"] >= 1
        client.close()
        with pytest.raises(httpx.HTTPError):  # plain http is not served
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).raise_for_status()
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(url + "/healthz", timeout=5)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("open_reads", [True, False])
def test_a_read_with_a_body_is_refused_unread(ctl: Controller, open_reads: bool) -> None:
    """Issue 26, point 1: an open read (/healthz always, every read with open reads) carrying
    a body was answered 200 after the guard had buffered the body (three 60 MB GETs: +281 MB).
    A read takes no body: refused from the headers, nothing pulled."""
    app = create_app(ctl, TOKEN, open_reads=open_reads)
    paths = ["/healthz", "/dashboard"] + (["/v1/status", "/v1/intent"] if open_reads else [])
    for method in ("GET", "HEAD", "OPTIONS"):
        for path in paths:
            for headers in ({}, {"Content-Length": str(60 << 20)}):  # chunked, then declared
                body = Counted(60 << 20)
                r = _call(app, method, path, content=body, headers=headers)
                assert r.status_code == 413, (method, path, headers, r.status_code)
                assert body.sent == 0, (method, path, headers, body.sent)
                if method != "HEAD":
                    assert "takes no body" in r.json()["detail"]
    # authenticated reads take no body either; a read without one is served as before
    body = Counted(1 << 20)
    assert _call(app, "GET", "/v1/status", content=body, headers=AUTH).status_code == 413
    assert body.sent == 0
    assert _call(app, "GET", "/healthz").status_code == 200
    assert _call(app, "GET", "/healthz", headers={"Content-Length": "0"}).status_code == 200
    assert _call(app, "GET", "/v1/status", headers=AUTH).status_code == 200
