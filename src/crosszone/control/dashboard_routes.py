"""The dashboard's HTTP side: its page and assets (all shipped in the package, under static/),
the JSON it polls, the migration record, the plan and simulation charts, and /metrics.

Every page is served with a Content-Security-Policy of 'self': a browser showing it fetches
nothing from any other host, even if a later edit slipped in a link to a CDN. Images may also
be blob: URLs: the page fetches the charts with the token (reads may need it) and shows them
from memory. A chart is served only as a regular file of the charts directory, never through a
symbolic link.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, Response
from starlette.concurrency import run_in_threadpool

from crosszone.control import dashboard
from crosszone.control.metrics import ControllerCollector, exposition
from crosszone.control.service import Controller
from crosszone.store.store import StoreUnavailable

STATIC = Path(__file__).with_name("static")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
       "frame-ancestors 'none'")
MEDIA = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _file(path: Path) -> FileResponse:
    """A shipped file with its media type and the policy header."""
    return FileResponse(path, media_type=MEDIA.get(path.suffix, "application/octet-stream"),
                        headers={"Content-Security-Policy": CSP, "Cache-Control": "no-cache"})


def _pick(directory: Path | None, name: str, suffixes: tuple[str, ...]) -> Path:
    """A file by bare name from one directory (no path, no dot-files), else 404."""
    if directory is None or not _SAFE_NAME.fullmatch(name) or not name.endswith(suffixes):
        raise HTTPException(404, "no such file")
    path = directory / name
    # a symbolic link in the directory could name any file of the host: not served
    if path.is_symlink() or not path.is_file():
        raise HTTPException(404, "no such file")
    return path


def _store_guard(fn: Any) -> Any:
    try:
        return fn()
    except StoreUnavailable as exc:
        raise HTTPException(503, f"store unavailable: {exc}") from None


async def _in_thread(fn: Callable[[], Any]) -> Any:
    return await run_in_threadpool(_store_guard, fn)


def add_dashboard(app: FastAPI, controller: Controller, prometheus: str | None,
                  charts_dir: Path | None,
                  read: Callable[[Callable[[], Any]], Awaitable[Any]] = _in_thread) -> None:
    """Register the dashboard's routes on the controller's app. read runs a read of data in
    a worker thread (the API's, bounded: control/api.py READ_THREADS) and turns a store
    outage into a 503."""
    prom = dashboard.PrometheusReader(prometheus) if prometheus else None
    shared = dashboard.SharedAnswers()

    if not any(getattr(r, "path", None) == "/v1/migration" for r in app.routes):
        # A read-only view of the record, for an API without the migration engine's own
        # route (which, when registered first, serves the same record and stays in charge).
        @app.get("/v1/migration")
        async def migration() -> dict[str, Any]:
            """The migration record (state, step, weights, guards, history); state "none"
            when no migration was ever started."""
            return await read(lambda: dashboard.migration(controller.store))

    @app.get("/v1/dashboard")
    async def snapshot(window: float = 300, step: float = 2) -> dict[str, Any]:
        """Gateways, rates over the last `window` seconds, migration, charts."""
        if not (0.5 <= step <= 60):
            raise HTTPException(422, "step must be between 0.5 and 60 seconds")
        if not math.isfinite(window):  # nan passed every bound and made int(nan) fail
            raise HTTPException(422, "window must be a finite number of seconds")
        # Off the event loop: Prometheus and the store may each take a moment.
        return await read(lambda: dashboard.snapshot(
            controller.status(), controller.store, prom, charts_dir, window, step,
            shared=shared))

    collector = ControllerCollector(controller.status,
                                    lambda: dashboard.migration(controller.store))

    @app.get("/metrics")
    async def metrics() -> Response:
        """The controller's Prometheus metrics (text exposition)."""
        return Response(await read(lambda: exposition(collector)),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/dashboard")
    def page() -> FileResponse:
        """The dashboard page (no data in it: it polls /v1/dashboard)."""
        return _file(STATIC / "dashboard.html")

    @app.get("/dashboard/static/{name}")
    def asset(name: str) -> FileResponse:
        """A script or style sheet shipped with the package."""
        return _file(_pick(STATIC, name, (".js", ".css")))

    @app.get("/dashboard/charts/{name}")
    def chart(name: str) -> FileResponse:
        """A plan or simulation chart (SVG) from the charts directory."""
        return _file(_pick(charts_dir, name, (".svg",)))
