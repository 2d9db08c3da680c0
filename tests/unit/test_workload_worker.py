"""The workload worker's goodput window: a fake clock and fake responses, and one real HTTP
response over loopback."""

from __future__ import annotations

import http.client
import socket
import threading
import time

import pytest

from crosszone_lab.workload import worker

pytestmark = pytest.mark.unit


class _Clock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class _Response:
    """Hands out `chunks` bytes per readinto, as a socket does, then ends."""

    def __init__(self, chunks: list[int]) -> None:
        self.chunks = list(chunks)

    def readinto(self, buf: memoryview) -> int:
        if not self.chunks:
            return 0
        n = min(self.chunks.pop(0), len(buf))
        buf[:n] = b"x" * n
        return n


def _worker(clock: _Clock, duration: float = 10.0, warmup: float = 2.0) -> worker.Worker:
    cfg = worker.Config(name="h1-a", servers=("172.16.0.11",), duration=duration, loaders=1,
                        block_bytes=1 << 20, shards=1, shard_bytes=1 << 20, ckpt_bytes=0,
                        ckpt_interval=1.0, ckpt_parallel=0, small_rate=0, max_requests=10,
                        seed=1, warmup=warmup)
    return worker.Worker(cfg, clock=clock)


def test_read_exact_reports_every_chunk_and_stops_at_the_end() -> None:
    seen: list[int] = []
    buf = memoryview(bytearray(100))
    assert worker._read_exact(_Response([30, 30, 30]), buf, seen.append) == 90  # type: ignore[arg-type]
    assert seen == [30, 30, 30]
    assert worker._read_exact(_Response([60, 60]), buf) == 100  # type: ignore[arg-type]


def test_a_real_response_is_counted_as_it_arrives_not_when_the_block_is_complete() -> None:
    """A 1 MiB body sent in 4 pieces 0.3 s apart over a real socket: the bytes of the first
    pieces are reported before the last one is sent (http.client's readinto on a buffered socket
    file would otherwise fill the whole buffer first and report 1 MiB once, at the end)."""
    size, pieces, gap = 1 << 20, 4, 0.3
    srv = socket.create_server(("127.0.0.1", 0))
    sent_last = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\n\r\n" % size)
            for i in range(pieces):
                if i:
                    time.sleep(gap)
                if i == pieces - 1:
                    sent_last.set()
                conn.sendall(b"x" * (size // pieces))
    t = threading.Thread(target=serve)
    t.start()
    client = http.client.HTTPConnection("127.0.0.1", srv.getsockname()[1], timeout=10)
    client.request("GET", "/dataset/shard-00000.bin", headers={"Range": "bytes=0-1048575"})
    resp = client.getresponse()
    seen: list[tuple[int, bool]] = []
    buf = memoryview(bytearray(size))
    got = worker._read_exact(resp, buf, lambda n: seen.append((n, sent_last.is_set())))
    t.join()
    client.close()
    srv.close()
    assert got == size and sum(n for n, _ in seen) == size
    assert max(n for n, _ in seen) <= worker.READ_SLICE
    early = sum(n for n, last in seen if not last)
    assert early >= (pieces - 1) * size // pieces - worker.READ_SLICE, \
        f"only {early} of {size} bytes counted before the last piece was sent"


def test_only_bytes_between_the_warmup_and_the_deadline_are_timed() -> None:
    clock = _Clock(100.0)
    w = _worker(clock)  # timed from 102.0, deadline 110.0
    for t, n in ((101.999, 1), (102.0, 10), (106.0, 100), (109.999, 1000), (110.0, 10_000),
                 (115.0, 100_000)):
        clock.t = t
        w.count_read(n)
    assert w.c.timed_read_bytes == 1110
    assert w.snapshot("result")["timed_read_bytes"] == 1110


def test_without_warmup_the_window_starts_at_once() -> None:
    clock = _Clock(5.0)
    w = _worker(clock, duration=1.0, warmup=0.0)
    w.count_read(7)
    clock.t = 6.0
    w.count_read(9)
    assert w.c.timed_read_bytes == 7


def test_a_raised_priority_it_may_not_take_is_a_clear_error(monkeypatch, capsys) -> None:
    """`--nice -10` without CAP_SYS_NICE stops the worker with the reason, before any traffic."""
    asked: list[int] = []

    def refuse(n: int) -> int:
        asked.append(n)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(worker.os, "nice", refuse)
    with pytest.raises(SystemExit) as exc:
        worker.main(["--name", "h1-a", "--servers", "127.0.0.1", "--duration", "1",
                     "--nice", "-10"])
    assert exc.value.code == 2 and asked == [-10]
    assert "--nice -10: raising a process's priority needs root" in capsys.readouterr().err


def test_the_niceness_is_applied_before_the_run(monkeypatch) -> None:
    asked: list[int] = []
    monkeypatch.setattr(worker.os, "nice", lambda n: asked.append(n) or 0)
    monkeypatch.setattr(worker.Worker, "run", lambda self, emit: (_ for _ in ()).throw(
        RuntimeError(f"ran after nice {asked}")))
    with pytest.raises(RuntimeError, match=r"ran after nice \[-10\]"):
        worker.main(["--name", "h1-a", "--servers", "127.0.0.1", "--duration", "1",
                     "--nice", "-10"])
