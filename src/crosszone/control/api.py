"""The controller's REST API (FastAPI; the OpenAPI document is served at /openapi.json).

Writes (apply, prefix changes) need `Authorization: Bearer <token>`; reads are open. Every
rejected intent is a 422 whose `detail` is the `InvalidIntentError` message (file, line, object,
field), and nothing is written.

    POST /v1/intent?dry_run=      body: intent YAML      -> revision, changed keys, per-gateway diff
    GET  /v1/intent                                      -> the desired state (version 2)
    POST /v1/pools/{pool}/prefixes?dry_run=  {add, remove}  -> revision
    GET  /v1/status                                      -> desired revision, each gateway's report
    GET  /v1/migration                                   -> the migration state (docs/migrate.md)
    POST /v1/migration/{start|pause|resume|rollback|finish}  -> the operation, queued for the runner
    GET  /v1/migration/ops/{id}                          -> what became of a queued operation
    GET  /v1/dashboard?window=&step=                     -> what the dashboard draws
    GET  /metrics                                        -> the controller's Prometheus metrics
    GET  /dashboard, /dashboard/static/*, /dashboard/charts/*.svg   -> the live dashboard
    GET  /healthz

Reads are open by default; with `open_reads=False` (`crosszone controller --reads token`) every
read but /healthz and the dashboard's page and assets (which hold no data) needs the token too.

Limits (docs/control.md): the token is checked and the body size bounded by `RequestGuard`, an
ASGI layer in front of FastAPI, before a byte of the body is read, so an unauthenticated or
oversized request, or a read carrying a body (refused: reads take none), costs neither memory
nor parsing. Validation, compilation and JSON parsing of a request run in a worker thread, so a
big apply never stalls /healthz or the reads. Reads of data hold at most READ_THREADS worker
threads (writes have anyio's own pool), and the intent document is serialised once per
revision and paced (ReadPacer), so open reads cannot slow writes (docs/security.md, "Limits on
reads"). /docs and /redoc are off: FastAPI's pages load their scripts from a public CDN, and no
page served here may reference another host; /openapi.json is the API's description.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import anyio
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool

from crosszone.control.dashboard_routes import add_dashboard
from crosszone.control.service import Controller
from crosszone.intent.errors import InvalidIntentError
from crosszone.migrate import engine as migration
from crosszone.migrate import op_queue
from crosszone.migrate.plan import PlanError
from crosszone.migrate.plan_schema import plan_from_bytes
from crosszone.store.store import StoreUnavailable

# Measured with bench.control.synthetic: 1M routes + 100k compact hosts are 26.4 MB of YAML
# (30.9 MB with verbose hosts), a full 2M-route table 42.2 MB. 64 MiB takes the largest intent
# the tables can hold and bounds what one request may make the controller buffer.
DEFAULT_MAX_BODY = 64 << 20
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: worker threads the reads of data (intent, status, migration, dashboard, metrics) may hold
#: at once; more readers wait their turn on the event loop. Writes run in anyio's default
#: pool (40 threads), so no number of open readers can make a write wait for a thread.
READ_THREADS = 4
#: the intent document (1.5 MB at 100k routes, ~15 MB at 1M) goes out at this many bytes per
#: second overall, after a burst of one second's worth; readers beyond it wait their turn
INTENT_READ_RATE = 32 << 20
#: readers of the intent allowed to wait for their turn; one more is a 503
INTENT_READ_QUEUE = 64
#: paths readable without the token even when reads need it: they carry no cluster data
PUBLIC_PATHS = ("/healthz", "/dashboard", "/dashboard/static/")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


class PrefixChange(BaseModel):
    """Prefixes to add to and remove from one storage pool."""

    model_config = {"extra": "forbid"}

    add: list[str] = []
    remove: list[str] = []


def bearer_ok(authorization: str, token: str) -> bool:
    """True when the header is `Bearer <token>` (a bare token, or another scheme, is refused)."""
    scheme, _, given = authorization.partition(" ")
    if not token or scheme.lower() != "bearer" or not given:  # schemes are case-insensitive
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


class ReadPacer:
    """Paces large reads to `rate` bytes per second overall, first come first served (a
    virtual clock: each read books size/rate seconds after the previous one, and may start as
    soon as its booking is less than `burst` seconds ahead of now). At most `queue` readers
    wait; `admit` returns False for one more, which the caller refuses."""

    def __init__(self, rate: float, queue: int, burst: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.queue, self.burst, self.clock = rate, queue, burst, clock
        self._booked = 0.0   # when the reads booked so far will have used their share
        self.waiting = 0

    async def admit(self, size: int) -> bool:
        """Wait for this read's turn (False: too many wait already)."""
        now = self.clock()
        start = max(self._booked - self.burst, now)
        if start > now and self.waiting >= self.queue:
            return False
        self._booked = max(self._booked, now) + size / self.rate
        if start > now:
            self.waiting += 1
            try:
                await asyncio.sleep(start - now)
            finally:
                self.waiting -= 1
        return True


class RequestGuard:
    """ASGI layer: 401 for a write without the token, 413 for a body above max_body and for
    any body on a read (GET, HEAD, OPTIONS), all answered before the body is read; the
    accepted body of a write is read here (at most max_body bytes) and replayed to the
    application."""

    def __init__(self, app: Asgi, token: str, max_body: int, open_reads: bool = True) -> None:
        self.app, self.token, self.max_body = app, token, max_body
        self.open_reads = open_reads

    def needs_token(self, method: str, path: str) -> bool:
        """Writes always; reads unless they are open or the path is public."""
        if method not in READ_METHODS:
            return True
        if self.open_reads:
            return False
        return not (path in PUBLIC_PATHS[:2] or path.startswith(PUBLIC_PATHS[2]))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the headers, then read a bounded body, then call the application."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if self.needs_token(scope["method"], scope.get("path", "")) and not bearer_ok(
                headers.get("authorization", ""), self.token):
            await _refuse(send, 401, "missing or wrong token (Authorization: Bearer <token>)",
                          {"www-authenticate": "Bearer"})
            return
        length = headers.get("content-length")
        if scope["method"] in READ_METHODS:
            # A read takes no body: one declared (a length above 0, or chunked) is refused
            # from the headers, and nothing is read, so an open read costs only its headers.
            if "transfer-encoding" in headers or (length is not None and length != "0"):
                await _refuse(send, 413, f"a {scope['method']} request takes no body")
                return
            await self.app(scope, receive, send)
            return
        if length is not None and (not length.isdigit() or int(length) > self.max_body):
            await _refuse(send, 413, f"request body above {self.max_body} bytes (--max-body)")
            return
        chunks: list[bytes] = []
        size = 0
        while True:  # a chunked body has no length: count as it comes, stop at the limit
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            size += len(message.get("body", b""))
            if size > self.max_body:
                await _refuse(send, 413, f"request body above {self.max_body} bytes (--max-body)")
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        chunks.clear()
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as ASGI says

        await self.app(scope, replay, send)


async def _refuse(send: Send, status: int, detail: str, extra: dict[str, str] | None = None
                  ) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
               (b"connection", b"close")]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _guard(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except InvalidIntentError as exc:
        raise HTTPException(422, str(exc)) from None
    except StoreUnavailable as exc:
        raise HTTPException(503, f"store unavailable: {exc}") from None


def _prefix_change(body: bytes) -> PrefixChange:
    try:
        return PrefixChange.model_validate_json(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise InvalidIntentError(err["msg"], path="request", where=where) from None


def create_app(controller: Controller, token: str, max_body: int = DEFAULT_MAX_BODY,
               open_reads: bool = True, prometheus: str | None = None,
               charts_dir: Path | None = None) -> Asgi:
    """The API of one controller behind its RequestGuard; token guards every write (and every
    read of data when open_reads is False). prometheus: the URL the dashboard's rates come
    from; charts_dir: where the plan and simulation SVGs are."""
    app = FastAPI(title="crosszone controller", version="1", docs_url=None, redoc_url=None,
                  description="Desired state of a crosszone gateway cluster. Writes need "
                  "`Authorization: Bearer <token>`.")

    @app.post("/v1/intent", openapi_extra={"requestBody": {
        "required": True, "content": {"application/yaml": {"schema": {"type": "string"}}}}})
    async def apply_intent(request: Request, dry_run: bool = False) -> dict[str, Any]:
        """Apply (or, with dry_run, only diff) an intent given as YAML in the body."""
        body = await request.body()  # already read (bounded) by RequestGuard

        def work() -> dict[str, Any]:
            try:
                text = body.decode()
            except UnicodeDecodeError:
                raise InvalidIntentError("the intent is not UTF-8 text", path="request") from None
            return controller.apply(text, dry_run=dry_run).as_dict()

        # Off the event loop: a 1M-route apply takes seconds; /healthz and reads go on.
        return await run_in_threadpool(_guard, work)

    reads = anyio.CapacityLimiter(READ_THREADS)

    async def read(fn: Callable[[], Any]) -> Any:
        """A read of data, in one of the READ_THREADS worker threads."""
        return await anyio.to_thread.run_sync(_guard, fn, limiter=reads)

    pacer = ReadPacer(INTENT_READ_RATE, INTENT_READ_QUEUE)

    @app.get("/v1/intent", responses={200: {"content": {"application/json": {}}}})
    async def get_intent() -> Response:
        """The desired state as a version-2 document: `{"revision", "intent"}` (serialised
        once per revision and shared by every reader; paced, see INTENT_READ_RATE)."""
        body = await read(controller.intent_json)
        if not await pacer.admit(len(body)):
            raise HTTPException(503, f"{INTENT_READ_QUEUE} readers of the intent are waiting "
                                "already; try again later", headers={"Retry-After": "5"})
        return Response(body, media_type="application/json")

    @app.post("/v1/pools/{pool}/prefixes", openapi_extra={"requestBody": {
        "required": True, "content": {"application/json": {
            "schema": PrefixChange.model_json_schema()}}}})
    async def change_prefixes(pool: str, request: Request, dry_run: bool = False
                              ) -> dict[str, Any]:
        """Add and remove prefixes of one storage pool."""
        body = await request.body()

        def work() -> dict[str, Any]:
            # JSON parsing of a big delta happens here, in the worker thread, too.
            change = _prefix_change(body)
            return controller.change_prefixes(pool, change.add, change.remove,
                                              dry_run).as_dict()

        return await run_in_threadpool(_guard, work)

    @app.get("/v1/status")
    async def status() -> dict[str, Any]:
        """Desired revision and every gateway's report (revision applied, health, counters)."""
        return await read(controller.status)

    @app.get("/v1/migration")
    async def migration_status() -> dict[str, Any]:
        """The migration: state, step, weight_new, history, guards, runner heartbeat."""
        return await read(lambda: migration.status(controller.store))

    @app.post("/v1/migration/{op}")
    async def migration_op(op: str, request: Request) -> dict[str, Any]:
        """Queue an operation for the migration runner (start takes the plan as JSON).

        The controller holds no driver: the runner (`crosszone migrate start|resume|run`)
        performs the operation at its next tick and answers it (GET /v1/migration/ops/{id});
        `runner_alive` says whether one is attached (an operation queued while none is alive
        expires instead of being performed later). A plan the schema refuses is a 422 naming
        the field; an operation that does not apply (or a stored migration that cannot be
        used) a 409 saying why."""
        body = await request.body()

        def work() -> dict[str, Any]:
            if op not in migration.OPS:
                raise HTTPException(404, f"unknown operation {op!r} (one of "
                                    f"{', '.join(migration.OPS)})")
            plan = None
            if op == "start":
                try:
                    plan = plan_from_bytes(body)
                except PlanError as exc:
                    raise HTTPException(422, str(exc)) from None
            try:
                queued = migration.submit(controller.store, op, plan=plan,
                                          reason="controller API")
            except migration.MigrationError as exc:
                raise HTTPException(409, str(exc)) from None
            doc = migration.status(controller.store)
            doc["queued"] = op
            doc["op"] = queued
            return doc

        return await run_in_threadpool(_guard, work)

    @app.get("/v1/migration/ops/{op_id}")
    async def migration_op_answer(op_id: str) -> dict[str, Any]:
        """One queued operation and what became of it (queued, running, done, refused, expired;
        `why` for the last two)."""
        doc = await read(lambda: op_queue.read(controller.store, op_id, time.time()))
        if doc is None:
            raise HTTPException(404, f"no migration operation {op_id!r}")
        return dict(doc)

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        """Liveness (answered on the event loop: it must never wait for a write)."""
        return {"ok": True, "revision": controller.revision}

    add_dashboard(app, controller, prometheus, charts_dir, read)
    return RequestGuard(app, token, max_body, open_reads)
