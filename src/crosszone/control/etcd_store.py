"""The cluster store: etcd v3, spoken through its JSON gateway over HTTP (httpx).

Why not the `etcd3` package: it pins protobuf<4 and grpcio builds that do not install cleanly
next to current packages on Python 3.11, and it is unmaintained. etcd 3.4 serves the same v3 API
as JSON on its client URL (/v3/kv/range, /v3/kv/txn, /v3/watch; keys and values base64), which
needs nothing beyond httpx.

One `put_many` is one etcd transaction, hence one etcd revision. Large intents need etcd started
with a larger --max-request-bytes and --max-txn-ops (the fixtures and the benchmark do); the
defaults (1.5 MiB, 128 operations) are for small configurations.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping

import httpx

from crosszone.control.store import Event, Store, StoreUnavailable


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _range_end(prefix: str) -> str:
    """The first key after every key with this prefix (etcd's prefix convention)."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return _b64(bytes(raw))


class EtcdStore(Store):
    """A Store in etcd, through the v3 JSON gateway at base_url (http://host:port)."""

    def __init__(self, base_url: str, timeout: float = 10.0, root: str = "/crosszone/") -> None:
        self.base_url = base_url.rstrip("/")
        self.root = root
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout)

    def _post(self, path: str, body: dict) -> dict:
        try:
            r = self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise StoreUnavailable(f"etcd {self.base_url}: {exc}") from None
        if r.status_code != 200:
            raise StoreUnavailable(f"etcd {self.base_url}{path}: HTTP {r.status_code}: "
                                   f"{r.text[:200]}")
        return r.json()

    def put_many(self, items: Mapping[str, bytes | None]) -> int:
        """One transaction with every put and delete; its revision."""
        ops = []
        for k, v in items.items():
            key = _b64(self.root + k)
            if v is None:
                ops.append({"requestDeleteRange": {"key": key}})
            else:
                ops.append({"requestPut": {"key": key, "value": _b64(v)}})
        out = self._post("/v3/kv/txn", {"success": ops})
        return int(out["header"]["revision"])

    def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        """Every key under prefix at one revision."""
        full = self.root + prefix
        out = self._post("/v3/kv/range", {"key": _b64(full), "range_end": _range_end(full)})
        n = len(self.root)
        items = {_unb64(kv["key"]).decode()[n:]: _unb64(kv.get("value", ""))
                 for kv in out.get("kvs", [])}
        return items, int(out["header"]["revision"])

    def revision(self) -> int:
        """The current etcd revision."""
        out = self._post("/v3/kv/range", {"key": _b64(self.root + "\0revision")})
        return int(out["header"]["revision"])

    def watch(self, prefix: str, after: int, timeout: float) -> list[Event]:
        """Open a watch from revision after+1; return the first batch of events (or [])."""
        full = self.root + prefix
        body = {"create_request": {"key": _b64(full), "range_end": _range_end(full),
                                   "start_revision": after + 1}}
        n = len(self.root)
        try:
            with self._http.stream("POST", "/v3/watch", json=body,
                                   timeout=httpx.Timeout(10.0, read=max(timeout, 0.001))) as r:
                if r.status_code != 200:
                    raise StoreUnavailable(f"etcd watch: HTTP {r.status_code}")
                for line in r.iter_lines():
                    if not line.strip():
                        continue
                    res = json.loads(line).get("result", {})
                    if int(res.get("compact_revision", 0) or 0):
                        raise StoreUnavailable(f"etcd watch: revision {after + 1} compacted "
                                               f"(oldest {res['compact_revision']})")
                    events = res.get("events") or []
                    if events:
                        return [Event(int(e["kv"]["mod_revision"]),
                                      _unb64(e["kv"]["key"]).decode()[n:],
                                      None if e.get("type") == "DELETE"
                                      else _unb64(e["kv"].get("value", "")))
                                for e in events]
        except httpx.ReadTimeout:
            return []
        except httpx.HTTPError as exc:
            raise StoreUnavailable(f"etcd {self.base_url}: {exc}") from None
        return []

    def close(self) -> None:
        """Close the HTTP client."""
        self._http.close()
