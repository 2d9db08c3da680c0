"""The product's byte-exact read (crosszone.probe.http_read) against a fake HTTP server on
loopback, IPv4 and IPv6: only the exact document is a good read, and each failure says why."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from crosszone.probe.http_read import Expected, Target, p99_ms, read_once, run_round
from probe_fakes import FakeHttp

DOC = b'{"shard": 0, "rows": 1000}\n' * 40


@pytest.fixture(params=["127.0.0.1", "::1"])
def server(request: pytest.FixtureRequest) -> Iterator[FakeHttp]:
    s = FakeHttp({"/meta/doc.json": DOC}, host=request.param)
    yield s
    s.close()


def _target(s: FakeHttp, path: str = "/meta/doc.json", expect: bytes = DOC) -> Target:
    host = s.server.server_address[0]
    return Target(host, path, Expected.of(expect), port=s.port)


def test_the_exact_document_is_a_good_read_with_its_size(server: FakeHttp) -> None:
    o = read_once(_target(server))
    assert o.ok, o.error
    assert o.nbytes == len(DOC) and o.ms > 0 and o.error == ""
    assert o.target.family == (6 if ":" in o.target.server else 4)


@pytest.mark.parametrize(("mode", "words"), [
    ("flip", "body differs (1080 bytes"),
    ("longer", "content-length 1081"),
    ("shorter", "content-length 1079"),
    ("lie_length", "content-length 1079"),
    ("chunked", "transfer-encoding"),
    ("huge_header", "header longer than"),
])
def test_anything_but_the_exact_document_fails_and_says_why(server: FakeHttp, mode: str,
                                                            words: str) -> None:
    server.mode = mode
    o = read_once(_target(server))
    assert not o.ok and words in o.error, o.error
    assert o.nbytes == 0


def test_a_missing_document_fails_with_the_status_line(server: FakeHttp) -> None:
    o = read_once(_target(server, "/meta/other.json"))
    assert not o.ok and "404" in o.error, o.error


def test_a_body_longer_than_expected_without_length_is_cut_and_refused() -> None:
    """A server that sends no Content-Length and more than the document: the read stops
    after one byte too many and refuses it (memory bounded by the expected size)."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            with contextlib.suppress(OSError):  # the reader hangs up early
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + DOC + b"x" * 100000)

    threading.Thread(target=serve, daemon=True).start()
    try:
        o = read_once(Target("127.0.0.1", "/x", Expected.of(DOC), port=srv.getsockname()[1]))
    finally:
        srv.close()
    assert not o.ok and "at least" in o.error, o.error


def _raw_server(answer: bytes, hold_s: float) -> socket.socket:
    """A server that sends `answer` to the first request, then keeps the connection `hold_s`."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(4096)
            with contextlib.suppress(OSError):
                conn.sendall(answer)
                time.sleep(hold_s)

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_a_server_that_keeps_the_connection_open_does_not_hold_the_read() -> None:
    srv = _raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(DOC), DOC),
                      hold_s=3.0)
    try:
        t0 = time.monotonic()
        o = read_once(Target("127.0.0.1", "/x", Expected.of(DOC), port=srv.getsockname()[1]),
                      response_s=2.0)
    finally:
        srv.close()
    assert o.ok, o.error
    assert time.monotonic() - t0 < 1.0


def test_an_answer_without_length_cut_short_by_the_deadline_fails() -> None:
    srv = _raw_server(b"HTTP/1.1 200 OK\r\n\r\n" + DOC, hold_s=3.0)
    try:
        o = read_once(Target("127.0.0.1", "/x", Expected.of(DOC), port=srv.getsockname()[1]),
                      response_s=0.3)
    finally:
        srv.close()
    assert not o.ok and "response:" in o.error and "timed out" in o.error, o.error


def test_a_refused_connection_fails_in_the_connect_phase() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening
        o = read_once(Target("127.0.0.1", "/x", Expected.of(b""), port=s.getsockname()[1]))
    assert not o.ok and "connect:" in o.error and "Refused" in o.error, o.error


def test_run_round_keeps_the_order_of_its_targets(server: FakeHttp) -> None:
    targets = [_target(server), _target(server, "/nope"), _target(server)]
    assert [o.ok for o in run_round(targets, parallel=3)] == [True, False, True]
    assert run_round([]) == []


@pytest.mark.parametrize(("size", "sha"), [
    (-1, "0" * 64), (True, "0" * 64), (1.0, "0" * 64), (1, "0" * 63), (1, "A" * 64),
    (1, "g" * 64), (1, 5)])
def test_an_expectation_is_validated(size: object, sha: object) -> None:
    with pytest.raises(ValueError):
        Expected(size, sha)  # type: ignore[arg-type]


def test_p99_is_nearest_rank() -> None:
    assert p99_ms([]) == 0.0
    assert p99_ms([5.0]) == 5.0
    assert p99_ms([float(i) for i in range(1, 101)]) == 99.0
