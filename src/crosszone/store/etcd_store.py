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

Several members (`etcd://[user@]h1:p1,h2:p2,h3:p3`): the store talks to one member at a time,
the current one. A request that cannot reach it (connection refused or reset, a timeout) or that
it answers with HTTP 5xx (etcd's "no leader", "leader changed", "request timed out" while a
leader is elected) moves to the next member and is retried there; passes over the members go on,
with a short pause between passes, for up to `failover_seconds` after the first failure (5; a
leader election takes one or two seconds), then StoreUnavailable names every endpoint tried and
what each answered. A write retried after a reply was lost may have committed already: it
commits again (the same values at a later revision; an agent's diff of it writes nothing). The
watch stream fails over the same way and resumes on the next member from the revision after the
last one handed to the caller, so nothing is missed and nothing comes twice; a compacted
revision is RevisionCompacted, as on one member. Tokens are kept per member and obtained from
each member when first needed there.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import logging
import re
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

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
_T = TypeVar("_T")
log = logging.getLogger("crosszone.store")


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


_HOSTPORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+))"
                       r"(?::(?P<port>[^:]*))?$")


def parse_etcd_url(url: str) -> tuple[bool, str | None, list[str]]:
    """(tls, user, ["host:port", ...]) from etcd[s]://[user@]host[:port][,host[:port]...].

    A missing port is etcd's client port, 2379. Raises ValueError naming what is wrong: a
    password in the URL, an empty host, a bad port, the same endpoint twice, a path."""
    usage = "etcd://[user@]host:port[,host:port...] or etcds://..."
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in ("etcd", "etcds"):
        raise ValueError(f"bad etcd URL {url!r} ({usage})")
    if any(c in rest for c in "?#") or rest.rstrip("/").count("/"):
        raise ValueError(f"bad etcd URL {url!r}: no path, query or fragment ({usage})")
    userinfo, at, hosts = rest.rstrip("/").rpartition("@")
    if at and ":" in userinfo:
        raise ValueError("a password in the store URL shows in `ps` and logs: give it in "
                         "CROSSZONE_ETCD_PASSWORD or CROSSZONE_ETCD_PASSWORD_FILE")
    if at and not userinfo:
        raise ValueError(f"bad etcd URL {url!r}: empty user before '@' ({usage})")
    endpoints: list[str] = []
    for i, item in enumerate(hosts.split(","), 1):
        m = _HOSTPORT.match(item.strip())
        if not item.strip() or m is None:
            raise ValueError(f"bad etcd URL {url!r}: endpoint {i} {item!r} has no host "
                             f"(host:port or [v6]:port) ({usage})")
        port = m["port"] if m["port"] is not None else "2379"
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bad etcd URL {url!r}: endpoint {i} {item!r} has a bad port "
                             f"(1-65535)")
        host = f"[{m['v6']}]" if m["v6"] else m["host"].lower()
        endpoint = f"{host}:{int(port)}"
        if endpoint in endpoints:
            raise ValueError(f"bad etcd URL {url!r}: endpoint {endpoint} is given twice")
        endpoints.append(endpoint)
    return scheme == "etcds", userinfo or None, endpoints


def _loopback(endpoint: str) -> bool:
    """Whether host:port names this machine (traffic that never leaves it)."""
    host = endpoint.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def _password(user: str, env: Mapping[str, str]) -> str:
    """The etcd user's password from CROSSZONE_ETCD_PASSWORD_FILE or CROSSZONE_ETCD_PASSWORD
    (ValueError naming the variable when it is missing, unreadable or empty)."""
    name = env.get("CROSSZONE_ETCD_PASSWORD_FILE")
    if name:
        try:
            password = Path(name).read_text().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ValueError(f"CROSSZONE_ETCD_PASSWORD_FILE {name}: {why}") from None
        if not password:
            raise ValueError(f"CROSSZONE_ETCD_PASSWORD_FILE {name} is empty: etcd user "
                             f"{user!r} needs its password there")
        return password
    if "CROSSZONE_ETCD_PASSWORD" not in env:
        raise ValueError(f"etcd user {user!r} needs a password: set CROSSZONE_ETCD_PASSWORD "
                         "or CROSSZONE_ETCD_PASSWORD_FILE")
    if not env["CROSSZONE_ETCD_PASSWORD"]:
        raise ValueError(f"CROSSZONE_ETCD_PASSWORD is empty: etcd user {user!r} needs its "
                         "password there (or in CROSSZONE_ETCD_PASSWORD_FILE)")
    return env["CROSSZONE_ETCD_PASSWORD"]


def _check_tls_files(ca: str | None, cert: str | None, key: str | None) -> None:
    """ValueError naming the variable whose file is missing, unreadable or not PEM (these
    used to surface as FileNotFoundError or ssl.SSLError from deep inside the store)."""
    for name, path in (("CA", ca), ("CERT", cert), ("KEY", key)):
        if path:
            try:
                Path(path).read_bytes()
            except OSError as exc:
                raise ValueError(f"CROSSZONE_ETCD_{name} {path}: {exc.strerror or exc}"
                                 ) from None
    try:
        if ca:
            ssl.create_default_context(cafile=ca)
    except ssl.SSLError as exc:
        raise ValueError(f"CROSSZONE_ETCD_CA {ca}: not a PEM CA bundle ({exc})") from None
    try:
        if cert and key:
            ssl.create_default_context().load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise ValueError(f"CROSSZONE_ETCD_CERT {cert} and CROSSZONE_ETCD_KEY {key}: not a PEM "
                         f"certificate and its key ({exc})") from None


def etcd_from_url(url: str, env: Mapping[str, str]) -> EtcdStore:
    """An EtcdStore from etcd://[user@]host:port[,host:port...] or etcds://... and the
    environment.

    ValueError names the variable or the part of the URL that is wrong. A password sent over
    plain http to a member that is not this machine is allowed (a trusted network) but logged
    as a warning: the password and the token travel in clear."""
    tls, user, endpoints = parse_etcd_url(url)
    password = None if user is None else _password(user, env)
    ca, cert, key = (env.get(f"CROSSZONE_ETCD_{n}") for n in ("CA", "CERT", "KEY"))
    if not tls and (ca or cert):
        raise ValueError("CROSSZONE_ETCD_CA/CERT given for a plain-http etcd URL: use etcds://")
    if bool(cert) != bool(key):
        raise ValueError("a client certificate needs both CROSSZONE_ETCD_CERT and "
                         "CROSSZONE_ETCD_KEY")
    _check_tls_files(ca, cert, key)
    remote = [e for e in endpoints if not _loopback(e)]
    if password is not None and not tls and remote:
        log.warning("etcd user %r: its password and token go in clear over http to %s; use "
                    "etcds:// (and CROSSZONE_ETCD_CA) unless that network is trusted", user,
                    ", ".join(remote))
    scheme = "https://" if tls else "http://"
    return EtcdStore([scheme + e for e in endpoints], user=user, password=password,
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


class _Failover(Exception):
    """This member cannot serve the request now (unreachable, no leader): try the next one."""


def _describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


class EtcdStore(Store):
    """A Store in etcd, through the v3 JSON gateway of one member or several (http://host:port
    each): requests go to the current member and fail over to the next (see the module doc)."""

    def __init__(self, base_url: str | Sequence[str], timeout: float = 10.0,
                 root: str = "/crosszone/", user: str | None = None,
                 password: str | None = None, verify: str | bool = True,
                 cert: tuple[str, str] | None = None, failover_seconds: float = 5.0) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("an etcd store needs at least one endpoint")
        self.endpoints = [u.rstrip("/") for u in urls]
        if len(set(self.endpoints)) != len(self.endpoints):
            raise ValueError(f"etcd endpoints given twice: {self.endpoints}")
        self.root = root
        self.timeout = timeout
        self.failover_seconds = failover_seconds
        self.user = user
        self._password = password
        self._tls: dict[str, Any] = {"verify": _ssl_context(verify, cert)}
        self._current = 0
        self._tokens: dict[str, str] = {}            # per member: obtained from that member
        self._clients: dict[str, httpx.Client] = {}  # per member, made when first needed
        self._lock = threading.Lock()                # _current and _clients
        self._cond = threading.Condition()
        self._stream: _WatchStream | None = None

    @property
    def base_url(self) -> str:
        """The current member's URL."""
        return self.endpoints[self._current]

    @property
    def _token(self) -> str | None:
        """The current member's token (None: authenticate on first use)."""
        return self._tokens.get(self.base_url)

    @_token.setter
    def _token(self, value: str | None) -> None:
        if value is None:
            self._tokens.pop(self.base_url, None)
        else:
            self._tokens[self.base_url] = value

    def _client(self, endpoint: str) -> httpx.Client:
        with self._lock:
            client = self._clients.get(endpoint)
            if client is None:
                client = httpx.Client(base_url=endpoint, timeout=self.timeout, **self._tls)
                self._clients[endpoint] = client
            return client

    def _advance(self, failed: str) -> None:
        """The member after `failed` becomes current (unless another thread moved on)."""
        with self._lock:
            if self.endpoints[self._current] == failed:
                self._current = (self._current + 1) % len(self.endpoints)

    def _failover(self, what: str, call: Callable[[str], _T], seconds: float) -> _T:
        """call(member) on the current member and, while it raises _Failover, on the next.

        Passes over every member go on, a short pause between them, until `seconds` have passed
        since the first failure (with one member, or seconds 0: one pass); then StoreUnavailable
        with each member's last answer."""
        deadline: float | None = None  # counted from the first failure
        last: dict[str, str] = {}
        attempts, pause = 0, 0.05
        while True:
            for _ in self.endpoints:
                endpoint = self.base_url
                try:
                    return call(endpoint)
                except _Failover as exc:
                    attempts += 1
                    last[endpoint] = str(exc)
                    self._advance(endpoint)
                    if deadline is None:
                        deadline = time.monotonic() + seconds
            assert deadline is not None
            if len(self.endpoints) == 1 or time.monotonic() + pause > deadline:
                break
            time.sleep(pause)
            pause = min(1.0, pause * 2)
        raise StoreUnavailable(
            f"etcd {what}: no member answered ({attempts} attempts over "
            f"{len(self.endpoints)} endpoints): " + "; ".join(f"{e}: {m}" for e, m in last.items()))

    def _authenticate(self, endpoint: str) -> str:
        """A fresh token from this member (StoreAuthError if etcd refuses the password)."""
        try:
            r = self._client(endpoint).post("/v3/auth/authenticate",
                                            json={"name": self.user, "password": self._password})
        except httpx.HTTPError as exc:  # unreachable, reset, timed out
            raise _Failover(_describe(exc)) from None
        auth = _auth_error(r.text, self.user)
        if r.status_code >= 500 and auth is None:
            raise _Failover(f"authenticate: HTTP {r.status_code}: {r.text[:200]}")
        if r.status_code != 200 or "token" not in r.text:
            raise auth or StoreAuthError(
                f"etcd {endpoint}: authenticate: HTTP {r.status_code}: {r.text[:200]}")
        token = str(r.json()["token"])
        self._tokens[endpoint] = token
        return token

    def _headers(self, endpoint: str) -> dict[str, str]:
        """The Authorization header (a token, authenticating first if needed) or none."""
        if self.user is None:
            return {}
        return {"Authorization": self._tokens.get(endpoint) or self._authenticate(endpoint)}

    def _post_one(self, endpoint: str, path: str, body: dict) -> dict:
        """One request to one member; _Failover when that member cannot serve it now."""
        for renewed in (False, True):
            try:
                r = self._client(endpoint).post(path, json=body, headers=self._headers(endpoint))
            except httpx.HTTPError as exc:  # unreachable, reset, timed out
                raise _Failover(_describe(exc)) from None
            if r.status_code == 200:
                return dict(r.json())
            if self.user is not None and not renewed and any(m in r.text for m in _STALE_TOKEN):
                self._tokens.pop(endpoint, None)  # expired (or etcd restarted): one new token
                continue
            auth = _auth_error(r.text, self.user)
            if auth is not None:
                raise auth
            if r.status_code >= 500:  # no leader, leader changed, request timed out, stopping
                raise _Failover(f"HTTP {r.status_code}: {r.text[:200]}")
            raise StoreUnavailable(f"etcd {endpoint}{path}: HTTP {r.status_code}: {r.text[:200]}")
        raise StoreAuthError(f"etcd {endpoint}: a renewed token was refused as stale")

    def _post(self, path: str, body: dict) -> dict:
        return self._failover(path, lambda endpoint: self._post_one(endpoint, path, body),
                              self.failover_seconds)

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

    def put_if(self, key: str, value: bytes | None, revision: int) -> int | None:
        """One transaction comparing the key's mod_revision (0: absent) before writing. A retry
        on another member after a lost reply that had committed compares against the revision
        it wrote itself and reports a conflict: the caller reads again, as for any conflict."""
        full = _b64(self.root + key)
        op = ({"requestDeleteRange": {"key": full}} if value is None
              else {"requestPut": {"key": full, "value": _b64(value)}})
        out = self._post("/v3/kv/txn", {
            "compare": [{"key": full, "target": "MOD", "result": "EQUAL",
                         "mod_revision": str(revision)}],
            "success": [op]})
        return int(out["header"]["revision"]) if out.get("succeeded") else None

    def get_versioned(self, key: str) -> tuple[bytes | None, int]:
        """One key's value and its mod_revision ((None, 0): absent)."""
        out = self._post("/v3/kv/range", {"key": _b64(self.root + key)})
        kvs = out.get("kvs") or []
        if not kvs:
            return None, 0
        return _unb64(kvs[0].get("value", "")), int(kvs[0]["mod_revision"])

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
        reopened when the caller asks for another prefix, or for revisions the stream has
        already passed, and after an error: then on the next member, from after+1 (what the
        failed stream had buffered beyond `after` comes again from the new one). When no member
        opens a stream in one pass, StoreUnavailable names each."""
        deadline = time.monotonic() + timeout
        reopened = 0
        with self._cond:
            w = self._stream
            if w is None or w.prefix != prefix or after + 1 < w.start or after < w.consumed:
                w = self._failover("watch", lambda e: self._open_stream(e, prefix, after + 1), 0)
            while True:
                if w.error is not None:
                    self._stream = None
                    w.stop()
                    if isinstance(w.error, (RevisionCompacted, StoreAuthError)):
                        raise w.error
                    if any(m in str(w.error) for m in _STALE_TOKEN):
                        self._tokens.pop(w.endpoint, None)  # the next stream authenticates
                    if reopened >= len(self.endpoints):  # streams that open, then fail at once
                        raise StoreUnavailable(f"etcd watch: {reopened + 1} streams failed in "
                                               f"one call, the last at {w.endpoint}: {w.error}")
                    reopened += 1
                    self._advance(w.endpoint)
                    w = self._failover("watch", lambda e: self._open_stream(e, prefix, after + 1),
                                       0)
                    continue
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

    def _open_stream(self, endpoint: str, prefix: str, start: int) -> _WatchStream:
        """A watch stream on this member from `start`, once etcd answered (called with _cond
        held); _Failover if the member refuses or cannot be reached."""
        headers = self._headers(endpoint)  # may authenticate (and fail) before state changes
        if self._stream is not None:
            self._stream.stop()
        w = _WatchStream(prefix, start, start - 1, endpoint)
        self._stream = w
        full = self.root + prefix
        body = {"create_request": {"key": _b64(full), "range_end": _range_end(full),
                                   "start_revision": start}}
        w.client = httpx.Client(base_url=endpoint, headers=headers,
                                timeout=httpx.Timeout(self.timeout, read=None), **self._tls)
        w.thread = threading.Thread(target=self._read_stream, args=(w, body), daemon=True,
                                    name=f"etcd-watch-{prefix}")
        w.thread.start()
        # wait until etcd answered (or refused), as a request would
        opened = time.monotonic() + self.timeout
        while not w.ready and w.error is None and time.monotonic() < opened:
            self._cond.wait(opened - time.monotonic())
        if w.error is not None and not isinstance(w.error, (RevisionCompacted, StoreAuthError)):
            self._stream = None
            w.stop()
            if any(m in str(w.error) for m in _STALE_TOKEN):
                self._tokens.pop(endpoint, None)
            raise _Failover(f"watch: {_describe(w.error)}")
        if not w.ready and w.error is None:
            self._stream = None
            w.stop()
            raise _Failover(f"watch: no answer in {self.timeout} s")
        return w

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
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()


@dataclass(eq=False)
class _WatchStream:
    """One open watch: events read so far and not yet taken, and how far the caller got."""

    prefix: str
    start: int                      # first revision the stream delivers
    consumed: int                   # last revision handed to the caller
    endpoint: str                   # the member it reads from
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
