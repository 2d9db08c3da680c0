"""Guard reads: 1 s for the connection (the path), more for the answer (the server), and the
error names the deadline missed. Real sockets on loopback, no emulator needed."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from crosszone_lab.workload import probe

BODY = b'{"shard": 0}'


class SlowServer:
    """Accepts at once (the kernel), answers after `delay` seconds (the application)."""

    def __init__(self, delay: float, body: bytes = BODY) -> None:
        self.delay, self.body = delay, body
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stop = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(4096)
            time.sleep(self.delay)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(self.body), self.body))

    def close(self) -> None:
        self.stop = True
        self.sock.close()


@pytest.fixture
def server() -> Iterator[SlowServer]:
    s = SlowServer(0.6)
    yield s
    s.close()


def _target(port: int) -> probe.Target:
    # ns "": the probe's own namespace (in_netns is a no-op without a name)
    return probe.Target("", "127.0.0.1", "/meta/x", BODY, port=port)


def test_a_slow_answer_within_the_response_deadline_is_a_good_read(server: SlowServer) -> None:
    o = probe.read_once(_target(server.port), connect_s=0.2, response_s=3.0)
    assert o.ok, o.error
    assert o.ms >= 550  # and its latency is what the p99 guard sees


def test_an_answer_past_the_response_deadline_fails_and_says_so(server: SlowServer) -> None:
    t0 = time.monotonic()
    o = probe.read_once(_target(server.port), connect_s=1.0, response_s=0.2)
    assert not o.ok and "response:" in o.error and "timed out" in o.error, o.error
    assert time.monotonic() - t0 < 0.55  # the deadline, not the server's delay


def test_a_trickling_answer_cannot_stretch_the_response_deadline() -> None:
    """A server that keeps sending a byte at a time: the deadline is for the whole answer,
    not per recv."""
    sock = socket.create_server(("127.0.0.1", 0))

    def trickle() -> None:
        conn, _ = sock.accept()
        with conn:
            conn.recv(4096)
            try:
                for b in b"HTTP/1.1 200 OK\r\n" * 20:
                    conn.send(bytes([b]))
                    time.sleep(0.05)
            except OSError:
                pass

    threading.Thread(target=trickle, daemon=True).start()
    try:
        t0 = time.monotonic()
        o = probe.read_once(_target(sock.getsockname()[1]), connect_s=1.0, response_s=0.4)
        assert not o.ok and "response:" in o.error, o.error
        assert time.monotonic() - t0 < 0.9
    finally:
        sock.close()


def test_a_refused_connection_fails_in_the_connect_phase() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening
        o = probe.read_once(_target(s.getsockname()[1]))
    assert not o.ok and "connect:" in o.error and "Refused" in o.error, o.error


def test_a_wrong_body_fails(server: SlowServer) -> None:
    server.body, server.delay = b'{"shard": 1}', 0.0
    o = probe.read_once(_target(server.port))
    assert not o.ok and "body differs" in o.error


def test_run_round_passes_both_deadlines(server: SlowServer) -> None:
    out = probe.run_round([_target(server.port)] * 3, connect_s=0.5, response_s=0.2)
    assert [o.ok for o in out] == [False] * 3
    out = probe.run_round([_target(server.port)] * 3, connect_s=0.5, response_s=3.0)
    assert [o.ok for o in out] == [True] * 3
