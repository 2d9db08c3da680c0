"""Several etcd members in one store URL: parsing, and failover from one member to the next.

Requests go to fake members (httpx.MockTransport) that refuse connections, answer "no leader",
or work, so each path is exercised on its own; the watch's resume after a stream dies mid-way
runs against a real etcd behind a proxy that the test cuts.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable

import httpx
import pytest

from crosszone.store.etcd_store import EtcdStore, parse_etcd_url
from crosszone.store.store import StoreAuthError, StoreUnavailable, open_store
from etcd_fixture import etcd_url  # noqa: F401  (fixture)

A, B, C = "http://a:2379", "http://b:2379", "http://c:2379"
OK = {"header": {"revision": "7"}}


@pytest.mark.parametrize("url,tls,user,endpoints", [
    ("etcd://h:1", False, None, ["h:1"]),
    ("etcd://h1:1,h2:2,h3:3", False, None, ["h1:1", "h2:2", "h3:3"]),
    ("etcds://root@H1:2379, h2:2380/", True, "root", ["h1:2379", "h2:2380"]),
    ("etcd://h", False, None, ["h:2379"]),
    ("etcd://[fd00::1]:2379,10.0.0.2:2379", False, None, ["[fd00::1]:2379", "10.0.0.2:2379"]),
])
def test_urls_with_several_endpoints(url: str, tls: bool, user: str | None,
                                     endpoints: list[str]) -> None:
    assert parse_etcd_url(url) == (tls, user, endpoints)


def test_open_store_keeps_every_endpoint_in_order() -> None:
    s = open_store("etcds://h1:1,h2:2,h3:3", env={})
    assert isinstance(s, EtcdStore)
    assert s.endpoints == ["https://h1:1", "https://h2:2", "https://h3:3"]
    assert s.base_url == "https://h1:1"
    s.close()


@pytest.mark.parametrize("url,match", [
    ("etcd://", "endpoint 1 '' has no host"),
    ("etcd://h1:1,,h3:3", "endpoint 2 '' has no host"),
    ("etcd://:2379", "endpoint 1 ':2379' has no host"),
    ("etcd://h1:1,h2:", "endpoint 2 'h2:' has a bad port"),
    ("etcd://h1:x", "bad port"),
    ("etcd://h1:0", "bad port"),
    ("etcd://h1:65536", "bad port"),
    ("etcd://h1:1,H1:1", "endpoint h1:1 is given twice"),
    ("etcd://h1,h1:2379", "endpoint h1:2379 is given twice"),
    ("etcd://root:pw@h1:1,h2:2", "password in the store URL"),
    ("etcd://@h1:1", "empty user"),
    ("etcd://h1:1/v3", "no path"),
    ("etcd://h1:1?x=1", "no path, query"),
])
def test_bad_urls_say_what_is_wrong(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        open_store(url, env={})


class _Members:
    """Fake members: each a function from a request to a response (or a raised error)."""

    def __init__(self, **behaviour: Callable[[httpx.Request], httpx.Response]) -> None:
        self.behaviour = {f"http://{k}:2379": v for k, v in behaviour.items()}
        self.calls: list[tuple[str, str, str | None]] = []

    def store(self, **kw: object) -> EtcdStore:
        s = EtcdStore(list(self.behaviour), **kw)  # type: ignore[arg-type]
        for url, fn in self.behaviour.items():
            def handler(req: httpx.Request, url: str = url, fn=fn) -> httpx.Response:
                self.calls.append((url, req.url.path, req.headers.get("authorization")))
                return fn(req)
            s._clients[url] = httpx.Client(base_url=url, transport=httpx.MockTransport(handler))
        return s


def _refused(req: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=req)


def _no_leader(req: httpx.Request) -> httpx.Response:
    return httpx.Response(503, json={"error": "etcdserver: no leader", "code": 14})


def _ok(req: httpx.Request) -> httpx.Response:
    return httpx.Response(200, json=OK)


def test_a_request_moves_to_the_next_member_and_stays_there() -> None:
    m = _Members(a=_refused, b=_no_leader, c=_ok)
    s = m.store()
    assert s.put("intent/k", b"v") == 7
    assert [c[0] for c in m.calls] == [A, B, C]
    assert s.base_url == C
    s.revision()
    assert [c[0] for c in m.calls] == [A, B, C, C]  # the working member first from now on


def test_every_member_failing_names_each_and_is_bounded() -> None:
    m = _Members(a=_refused, b=_no_leader, c=_refused)
    s = m.store(failover_seconds=0.5)
    t0 = time.monotonic()
    with pytest.raises(StoreUnavailable) as err:
        s.get_prefix("intent/")
    took = time.monotonic() - t0
    text = str(err.value)
    assert f"{A}: [Errno 111] Connection refused" in text
    assert f"{B}: HTTP 503" in text and "no leader" in text and f"{C}: " in text
    assert 0.3 < took < 3, took  # retried passes for about failover_seconds, then gave up
    assert len(m.calls) >= 6 and len(m.calls) % 3 == 0  # whole passes over the members


def test_one_member_is_tried_once() -> None:
    m = _Members(a=_refused)
    s = m.store(failover_seconds=30)
    with pytest.raises(StoreUnavailable, match="Connection refused"):
        s.revision()
    assert len(m.calls) == 1


def test_a_client_error_does_not_fail_over() -> None:
    m = _Members(a=lambda r: httpx.Response(400, text="etcdserver: too many operations"),
                 b=_ok)
    s = m.store()
    with pytest.raises(StoreUnavailable, match="too many operations"):
        s.put("intent/k", b"v")
    assert [c[0] for c in m.calls] == [A]


def _member_with_tokens(name: str, issued: list[str]) -> Callable[[httpx.Request], httpx.Response]:
    """A member that issues its own tokens and accepts only those it issued."""
    def handle(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v3/auth/authenticate":
            assert json.loads(req.content)["password"] == "pw"
            issued.append(f"{name}-{len(issued)}")
            return httpx.Response(200, json={"token": issued[-1]})
        if req.headers.get("authorization") not in issued:
            return httpx.Response(401, json={"error": "etcdserver: invalid auth token"})
        return httpx.Response(200, json=OK)
    return handle


def test_tokens_are_obtained_from_each_member() -> None:
    issued_b: list[str] = []
    m = _Members(a=_refused, b=_member_with_tokens("b", issued_b))
    s = m.store(user="root", password="pw")
    s._tokens[A] = "a-token"  # a token from a, which b does not know
    assert s.revision() == 7
    assert issued_b == ["b-0"]
    assert m.calls[-1] == (B, "/v3/kv/range", "b-0")
    # b forgets its tokens (restarted): one new token from b, the request retried
    issued_b[:] = ["b-x"]
    s._tokens[B] = "b-0"
    assert s.revision() == 7 and s._token == "b-1" and issued_b == ["b-x", "b-1"]


def test_a_refused_password_is_not_an_outage() -> None:
    def refuse(req: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": "etcdserver: authentication failed, "
                                                  "invalid user ID or password"})
    m = _Members(a=refuse, b=_ok)
    s = m.store(user="root", password="bad")
    with pytest.raises(StoreAuthError, match="refused user 'root'"):
        s.revision()
    assert [c[0] for c in m.calls] == [A]


class _Proxy:
    """A TCP proxy to a real etcd that the test can cut (every connection closed, no more
    accepted), as a member that dies looks to its clients."""

    def __init__(self, target: str) -> None:
        host, port = target.split("://", 1)[1].rsplit(":", 1)
        self.target = (host, int(port))
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.cut_done = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.cut_done:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self.cut_done = True
        self.server.close()
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)


def test_watch_resumes_on_the_next_member_without_gaps_or_repeats(etcd_url: str) -> None:  # noqa: F811
    proxy = _Proxy(etcd_url)
    s = EtcdStore([proxy.url, etcd_url], root=f"/fo{time.monotonic_ns()}/")
    writer = EtcdStore(etcd_url, root=s.root)
    try:
        r0 = writer.revision()
        got = []
        first = [writer.put(f"intent/k{i}", b"1") for i in range(3)]
        while len(got) < 3:
            got += s.watch("intent/", got[-1].revision if got else r0, 5) or pytest.fail("idle")
        stream = s._stream
        assert stream is not None and stream.endpoint == proxy.url
        # more changes reach the stream's buffer, then its member dies before they are taken
        buffered = [writer.put(f"intent/k{i}", b"2") for i in range(3)]
        deadline = time.monotonic() + 5
        while len(stream.buffer) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [e.revision for e in stream.buffer] == buffered
        proxy.cut()
        while stream.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert stream.error is not None
        later = [writer.put(f"intent/k{i}", b"3") for i in range(3)]  # after the death
        while len(got) < 9:
            got += s.watch("intent/", got[-1].revision, 5) or pytest.fail("idle")
        assert [e.revision for e in got] == first + buffered + later
        assert s._stream is not stream and s._stream is not None
        assert s._stream.endpoint == etcd_url and s.base_url == etcd_url
        assert s.watch("intent/", got[-1].revision, 0.2) == []  # nothing comes twice
    finally:
        s.close()
        writer.close()


def test_watch_with_no_member_left_names_each() -> None:
    s = EtcdStore(["http://127.0.0.1:9", "http://127.0.0.1:7"], timeout=1)
    with pytest.raises(StoreUnavailable, match=r"127\.0\.0\.1:9: .*127\.0\.0\.1:7: "):
        s.watch("intent/", 0, 0.1)
    s.close()
