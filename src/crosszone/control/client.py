"""A small client of the controller's REST API (httpx), used by `apply` and `status`."""

from __future__ import annotations

import ssl
from typing import Any

import httpx


class ControllerError(RuntimeError):
    """The controller refused a request or cannot be reached."""


class Client:
    """Talk to one controller."""

    def __init__(self, url: str, token: str = "", timeout: float = 60.0,
                 verify: str | bool = True) -> None:
        # verify: True (system CAs) or the path of a PEM CA file for an https controller
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        ctx = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout,
                                  verify=ctx)

    def _call(self, method: str, path: str, **kw: Any) -> dict[str, Any]:
        try:
            r = self._http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ControllerError(f"controller {self._http.base_url}: {exc}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ControllerError(f"HTTP {r.status_code}: {detail}")
        return r.json()

    def apply(self, text: str, dry_run: bool = False) -> dict[str, Any]:
        """POST an intent (YAML text)."""
        return self._call("POST", "/v1/intent", params={"dry_run": dry_run},
                          content=text.encode(), headers={"Content-Type": "application/yaml"})

    def change_prefixes(self, pool: str, add: list[str] = (), remove: list[str] = (),  # type: ignore[assignment]
                        dry_run: bool = False) -> dict[str, Any]:
        """Add/remove prefixes of one pool."""
        return self._call("POST", f"/v1/pools/{pool}/prefixes", params={"dry_run": dry_run},
                          json={"add": list(add), "remove": list(remove)})

    def intent(self) -> dict[str, Any]:
        """The desired state."""
        return self._call("GET", "/v1/intent")

    def status(self) -> dict[str, Any]:
        """Desired revision and gateway reports."""
        return self._call("GET", "/v1/status")

    def dashboard(self, window: float = 60) -> dict[str, Any]:
        """What the dashboard shows (gateways, rates over `window` seconds, migration)."""
        return self._call("GET", "/v1/dashboard", params={"window": window})

    def migration(self) -> dict[str, Any]:
        """GET /v1/migration: state, step, weight_new, history, guards, runner."""
        return self._call("GET", "/v1/migration")

    def migration_op(self, op: str, plan: dict[str, Any] | None = None) -> dict[str, Any]:
        """POST /v1/migration/{op} (start takes the plan), queued for the runner; the answer's
        `op` is the queued operation (its `id` for migration_op_answer)."""
        return self._call("POST", f"/v1/migration/{op}", json=plan if plan is not None else {})

    def migration_op_answer(self, op_id: str) -> dict[str, Any]:
        """GET /v1/migration/ops/{id}: a queued operation and what became of it."""
        return self._call("GET", f"/v1/migration/ops/{op_id}")

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()
