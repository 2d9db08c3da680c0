"""The controller's REST API (FastAPI; the OpenAPI document is served at /openapi.json).

Writes (apply, prefix changes) need `Authorization: Bearer <token>`; reads are open. Every
rejected intent is a 422 whose `detail` is the `InvalidIntentError` message (file, line, object,
field), and nothing is written.

    POST /v1/intent?dry_run=      body: intent YAML      -> revision, changed keys, per-gateway diff
    GET  /v1/intent                                      -> the desired state (version 2)
    POST /v1/pools/{pool}/prefixes?dry_run=  {add, remove}  -> revision
    GET  /v1/status                                      -> desired revision, each gateway's report
    GET  /healthz
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import Depends, FastAPI, Header, HTTPException, Request
from pydantic import BaseModel

from crosszone.control.service import Controller
from crosszone.intent.errors import InvalidIntentError
from crosszone.store.store import StoreUnavailable


class PrefixChange(BaseModel):
    """Prefixes to add to and remove from one storage pool."""

    add: list[str] = []
    remove: list[str] = []


def create_app(controller: Controller, token: str) -> FastAPI:
    """The API of one controller; token guards every write."""
    app = FastAPI(title="crosszone controller", version="1",
                  description="Desired state of a crosszone gateway cluster.")

    def require_token(authorization: str = Header(default="")) -> None:
        given = authorization.removeprefix("Bearer ").strip()
        if not token or not hmac.compare_digest(given.encode(), token.encode()):
            raise HTTPException(401, "missing or wrong token (Authorization: Bearer <token>)")

    def guard(fn: Any) -> Any:
        try:
            return fn()
        except InvalidIntentError as exc:
            raise HTTPException(422, str(exc)) from None
        except StoreUnavailable as exc:
            raise HTTPException(503, f"store unavailable: {exc}") from None

    @app.post("/v1/intent", dependencies=[Depends(require_token)])
    async def apply_intent(request: Request, dry_run: bool = False) -> dict[str, Any]:
        """Apply (or, with dry_run, only diff) an intent given as YAML in the body."""
        body = await request.body()
        try:
            text = body.decode()
        except UnicodeDecodeError:
            raise HTTPException(422, "request: the intent is not UTF-8 text") from None
        return guard(lambda: controller.apply(text, dry_run=dry_run).as_dict())

    @app.get("/v1/intent")
    def get_intent() -> dict[str, Any]:
        """The desired state as a version-2 document."""
        return guard(lambda: {"revision": controller.revision, "intent": controller.document()})

    @app.post("/v1/pools/{pool}/prefixes", dependencies=[Depends(require_token)])
    def change_prefixes(pool: str, change: PrefixChange, dry_run: bool = False
                        ) -> dict[str, Any]:
        """Add and remove prefixes of one storage pool."""
        return guard(lambda: controller.change_prefixes(pool, change.add, change.remove,
                                                        dry_run).as_dict())

    @app.get("/v1/status")
    def status() -> dict[str, Any]:
        """Desired revision and every gateway's report (revision applied, health, counters)."""
        return guard(controller.status)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        """Liveness."""
        return {"ok": True, "revision": controller.revision}

    return app
