"""The cluster store: etcd v3, spoken through its JSON gateway over HTTP (httpx).

Why not the `etcd3` package: it pins protobuf<4 and grpcio builds that do not install cleanly
next to current packages on Python 3.11, and it is unmaintained. etcd 3.4 serves the same v3 API
as JSON on its client URL (/v3/kv/range, /v3/kv/txn, /v3/watch; keys and values base64), which
needs nothing beyond httpx.

One `put_many` is one etcd transaction, hence one etcd revision. `watch` keeps one watch stream
open (a thread reads it), so a change reaches the agent as soon as etcd sends it, instead of
after a new stream is set up per call. Large intents need etcd started
with a larger --max-request-bytes and --max-txn-ops (the fixtures and the benchmark do); the
defaults (1.5 MiB, 128 operations) are for small configurations.

Authentication (etcd `auth enable`): with a user, the store gets a token from
/v3/auth/authenticate and sends it in the Authorization header of every request and of the watch
stream; a token etcd no longer knows (simple tokens expire, 5 minutes by default) is renewed once
and the request retried. Refusals are StoreAuthError with what to configure. https with a CA
bundle and an optional client certificate is httpx's verify/cert (`etcd_from_url` reads them
from the environment, never from argv).
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from crosszone.store.store import (
    Event,
    RevisionCompacted,
    Store,
    StoreAuthError,
    StoreUnavailable,
)

# etcd's messages for "no or wrong credentials" and for "this token expired"
_NEEDS_AUTH = ("user name is empty", "authentication failed", "permission denied",
               "invalid auth management")
_STALE_TOKEN = ("invalid auth token", "auth token is not found")


def _auth_error(text: str, user: str | None) -> StoreAuthError | None:
    """A StoreAuthError saying what to configure, if etcd's error text is about credentials."""
    if "user name is empty" in text:
        return StoreAuthError("etcd requires authentication: give a user in the store URL "
                              "(etcd://USER@host:port) and its password in "
                              "CROSSZONE_ETCD_PASSWORD or CROSSZONE_ETCD_PASSWORD_FILE")
    if any(m in text for m in _NEEDS_AUTH):
        return StoreAuthError(f"etcd refused user {user!r}: {text.strip()[:200]}")
    return None


def _ssl_context(verify: str | bool, cert: tuple[str, str] | None) -> ssl.SSLContext | bool:
    """What httpx takes as verify: a context with our CA and client certificate, or a bool."""
    if verify is True and cert is None:
        return True
    if verify is False:
        return False
    ctx = ssl.create_default_context(cafile=verify if isinstance(verify, str) else None)
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return ctx


def etcd_from_url(url: str, env: Mapping[str, str]) -> EtcdStore:
    """An EtcdStore from etcd://[user@]host:port or etcds://... and the environment."""
    parts = urlsplit(url)
    if parts.password is not None:
        raise ValueError("a password in the store URL shows in `ps` and logs: give it in "
                         "CROSSZONE_ETCD_PASSWORD or CROSSZONE_ETCD_PASSWORD_FILE")
    if not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"bad etcd URL {url!r} (etcd://[user@]host:port)")
    user = parts.username or None
    password = None
    if user is not None:
        if env.get("CROSSZONE_ETCD_PASSWORD_FILE"):
            password = Path(env["CROSSZONE_ETCD_PASSWORD_FILE"]).read_text().rstrip("\r\n")
        else:
            password = env.get("CROSSZONE_ETCD_PASSWORD")
        if password is None:
            raise ValueError(f"etcd user {user!r} needs a password: set CROSSZONE_ETCD_PASSWORD "
                             "or CROSSZONE_ETCD_PASSWORD_FILE")
    tls = parts.scheme == "etcds"
    ca, cert, key = (env.get(f"CROSSZONE_ETCD_{n}") for n in ("CA", "CERT", "KEY"))
    if not tls and (ca or cert):
        raise ValueError("CROSSZONE_ETCD_CA/CERT given for a plain-http etcd URL: use etcds://")
    if bool(cert) != bool(key):
        raise ValueError("a client certificate needs both CROSSZONE_ETCD_CERT and "
                         "CROSSZONE_ETCD_KEY")
    host = parts.netloc.rpartition("@")[2]
    return EtcdStore(("https://" if tls else "http://") + host, user=user, password=password,
                     verify=ca or True, cert=(cert, key) if cert and key else None)


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

    def __init__(self, base_url: str, timeout: float = 10.0, root: str = "/crosszone/",
                 user: str | None = None, password: str | None = None,
                 verify: str | bool = True, cert: tuple[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.root = root
        self.timeout = timeout
        self.user = user
        self._password = password
        self._tls: dict[str, Any] = {"verify": _ssl_context(verify, cert)}
        self._token: str | None = None
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, **self._tls)
        self._cond = threading.Condition()
        self._stream: _WatchStream | None = None

    def _authenticate(self) -> str:
        """A fresh token for our user (StoreAuthError if etcd refuses the password)."""
        try:
            r = self._http.post("/v3/auth/authenticate",
                                json={"name": self.user, "password": self._password})
        except httpx.HTTPError as exc:
            raise StoreUnavailable(f"etcd {self.base_url}: {exc}") from None
        if r.status_code != 200 or "token" not in r.text:
            raise _auth_error(r.text, self.user) or StoreAuthError(
                f"etcd {self.base_url}: authenticate: HTTP {r.status_code}: {r.text[:200]}")
        self._token = str(r.json()["token"])
        return self._token

    def _headers(self) -> dict[str, str]:
        """The Authorization header (a token, authenticating first if needed) or none."""
        if self.user is None:
            return {}
        return {"Authorization": self._token or self._authenticate()}

    def _post(self, path: str, body: dict, retry: bool = True) -> dict:
        try:
            r = self._http.post(path, json=body, headers=self._headers())
        except httpx.HTTPError as exc:
            raise StoreUnavailable(f"etcd {self.base_url}: {exc}") from None
        if r.status_code != 200:
            if self.user is not None and retry and any(m in r.text for m in _STALE_TOKEN):
                self._token = None  # expired (or etcd restarted): one new token, one retry
                return self._post(path, body, retry=False)
            raise _auth_error(r.text, self.user) or StoreUnavailable(
                f"etcd {self.base_url}{path}: HTTP {r.status_code}: {r.text[:200]}")
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
        """Events under prefix after a revision, from one long-lived watch stream.

        The stream (POST /v3/watch, a streaming response) is opened once, from after+1, and
        read by a thread into a buffer; each call takes what arrived or waits for it. It is
        reopened only when the caller asks for another prefix, or for revisions the stream has
        already passed, or after an error (raised here as StoreUnavailable once)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            w = self._stream
            if w is None or w.prefix != prefix or after + 1 < w.start or after < w.consumed:
                self._open_stream(prefix, after + 1)
                w = self._stream
                assert w is not None
                # a new stream: wait until etcd answered (or refused), as a request would
                opened = time.monotonic() + self.timeout
                while not w.ready and w.error is None and time.monotonic() < opened:
                    self._cond.wait(opened - time.monotonic())
            assert w is not None
            while True:
                if w.error is not None:
                    self._stream = None
                    w.stop()
                    if isinstance(w.error, (RevisionCompacted, StoreAuthError)):
                        raise w.error
                    if any(m in str(w.error) for m in _STALE_TOKEN):
                        self._token = None  # the next stream authenticates again
                    raise StoreUnavailable(f"etcd {self.base_url}: watch: {w.error}")
                while w.buffer and w.buffer[0].revision <= after:
                    w.buffer.popleft()
                if w.buffer:
                    out = list(w.buffer)
                    w.buffer.clear()
                    w.consumed = out[-1].revision
                    return out
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                self._cond.wait(left)

    def _open_stream(self, prefix: str, start: int) -> None:
        headers = self._headers()  # may authenticate (and fail) before any state changes
        if self._stream is not None:
            self._stream.stop()
        w = _WatchStream(prefix, start, start - 1)
        self._stream = w
        full = self.root + prefix
        body = {"create_request": {"key": _b64(full), "range_end": _range_end(full),
                                   "start_revision": start}}
        w.client = httpx.Client(base_url=self.base_url, headers=headers,
                                timeout=httpx.Timeout(self.timeout, read=None), **self._tls)
        w.thread = threading.Thread(target=self._read_stream, args=(w, body), daemon=True,
                                    name=f"etcd-watch-{prefix}")
        w.thread.start()

    def _read_stream(self, w: _WatchStream, body: dict) -> None:
        n = len(self.root)
        try:
            assert w.client is not None
            with w.client.stream("POST", "/v3/watch", json=body) as r:
                if r.status_code != 200:
                    text = r.read().decode(errors="replace")
                    raise _auth_error(text, self.user) or StoreUnavailable(
                        f"HTTP {r.status_code}: {text[:200]}")
                ns = r.extensions.get("network_stream")
                w.sock = ns.get_extra_info("socket") if ns is not None else None
                with self._cond:
                    w.ready = True
                    self._cond.notify_all()
                if w.stopped:
                    return
                for line in r.iter_lines():
                    if w.stopped:
                        return
                    if not line.strip():
                        continue
                    msg = json.loads(line)
                    if "error" in msg:
                        raise StoreUnavailable(f"{msg['error']}")
                    res = msg.get("result", {})
                    if int(res.get("compact_revision", 0) or 0):
                        raise RevisionCompacted(w.start - 1, int(res["compact_revision"]) - 1)
                    if res.get("canceled"):
                        reason = str(res.get("cancel_reason", ""))
                        raise _auth_error(reason, self.user) or StoreUnavailable(
                            f"canceled: {reason}")
                    events = [Event(int(e["kv"]["mod_revision"]),
                                    _unb64(e["kv"]["key"]).decode()[n:],
                                    None if e.get("type") == "DELETE"
                                    else _unb64(e["kv"].get("value", "")))
                              for e in res.get("events") or []]
                    if events:
                        with self._cond:
                            w.buffer.extend(events)
                            self._cond.notify_all()
            raise StoreUnavailable("the watch stream ended")
        except Exception as exc:  # reported to the caller of watch
            if not w.stopped:
                with self._cond:
                    w.error = exc
                    self._cond.notify_all()

    def close(self) -> None:
        """Close the HTTP clients (and the watch stream)."""
        with self._cond:
            if self._stream is not None:
                self._stream.stop()
                self._stream = None
        self._http.close()


@dataclass(eq=False)
class _WatchStream:
    """One open watch: events read so far and not yet taken, and how far the caller got."""

    prefix: str
    start: int                      # first revision the stream delivers
    consumed: int                   # last revision handed to the caller
    buffer: deque[Event] = field(default_factory=deque)
    error: Exception | None = None
    ready: bool = False             # etcd answered 200
    stopped: bool = False
    client: httpx.Client | None = None
    thread: threading.Thread | None = None
    sock: socket.socket | None = None

    def stop(self) -> None:
        """Close the stream: shut its socket down, which ends the blocked read of its thread."""
        self.stopped = True
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.shutdown(socket.SHUT_RDWR)
        if self.client is not None:
            with contextlib.suppress(Exception):  # closing from another thread may race
                self.client.close()
