"""The SQLite store's watch waits on inotify, not a 2 ms poll: prompt, and idle when idle."""

from __future__ import annotations

import contextlib
import gc
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from crosszone.linux import inotify
from crosszone.store.sqlite_store import SqliteStore


def _event(mask: int, name: bytes, pad: int = 16) -> bytes:
    padded = name + b"\0" * (pad - len(name)) if name else b""
    return struct.pack("iIII", 1, mask, 0, len(padded)) + padded


def test_matches_takes_only_names_with_the_prefix_and_overflows() -> None:
    other = _event(inotify.IN_MODIFY, b"agent.log")
    assert not inotify.matches(other, b"s.db")
    assert inotify.matches(other + _event(inotify.IN_MODIFY, b"s.db-wal"), b"s.db")
    assert inotify.matches(_event(inotify.IN_CREATE, b"s.db-shm"), b"s.db")
    assert inotify.matches(_event(inotify.IN_Q_OVERFLOW, b""), b"s.db")
    assert not inotify.matches(_event(0x10, b"s.db"), b"s.db")  # IN_CLOSE_NOWRITE: a reader
    cut = _event(inotify.IN_MODIFY, b"s.db-wal")[:20]  # an event cut short is not read past
    assert not inotify.matches(other + cut, b"s.db")


def test_dir_changes_wakes_for_its_files_only(tmp_path: Path) -> None:
    with inotify.DirChanges(str(tmp_path), "s.db") as ch:
        (tmp_path / "other.log").write_text("x")
        assert not ch.wait(0.05)
        (tmp_path / "s.db-wal").write_text("x")
        assert ch.wait(2.0)
        (tmp_path / "s.db-wal").unlink()  # deleted and created again: still watched
        assert ch.wait(2.0)
        (tmp_path / "s.db-wal").write_text("y")
        assert ch.wait(2.0)
        assert not ch.wait(0.05)  # nothing left queued


def test_dir_changes_of_a_missing_directory_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="inotify_add_watch"):
        inotify.DirChanges(str(tmp_path / "gone"), "s.db")


def _count_reads(store: SqliteStore) -> list[int]:
    n = [0]
    run = store._run

    def counted(fn):  # type: ignore[no-untyped-def]
        n[0] += 1
        return run(fn)
    store._run = counted  # type: ignore[method-assign]
    return n


def test_an_idle_watch_does_not_poll_even_beside_a_busy_file(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    reads = _count_reads(store)
    stop = threading.Event()

    def log() -> None:  # an agent's log beside the database, written every millisecond
        with (tmp_path / "agent.log").open("a") as f:
            while not stop.is_set():
                f.write("line\n")
                f.flush()
                time.sleep(0.001)
    t = threading.Thread(target=log)
    t.start()
    try:
        assert store.watch("a/", store.revision(), 1.0) == []
    finally:
        stop.set()
        t.join()
    # one read per idle_s (50 ms) at most, where a 2 ms poll makes about 500
    assert reads[0] <= 1.0 / store.idle_s + 3, reads[0]
    polled = SqliteStore(str(tmp_path / "p.db"), notify=False)
    preads = _count_reads(polled)
    assert polled.watch("a/", polled.revision(), 0.2) == []
    assert preads[0] >= 20, "the polling store is the baseline this test compares with"
    store.close()
    polled.close()


def test_a_write_by_another_process_wakes_the_watch(tmp_path: Path) -> None:
    db = str(tmp_path / "s.db")
    store = SqliteStore(db)
    rev = store.revision()
    reads = _count_reads(store)
    code = ("import sys, time; from crosszone.store.sqlite_store import SqliteStore; "
            "time.sleep(0.3); SqliteStore(sys.argv[1]).put_many({'a/k': b'v'})")
    writer = subprocess.Popen([sys.executable, "-c", code, db])
    try:
        got = store.watch("a/", rev, 20.0)
    finally:
        writer.wait(timeout=30)
    assert [(e.key, e.value) for e in got] == [("a/k", b"v")]
    assert reads[0] < 0.3 / store.poll_s / 2, f"{reads[0]} reads: it polled"
    store.close()


def test_a_write_by_another_thread_wakes_the_watch_and_each_thread_has_its_own(
        tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    rev = store.revision()
    got: dict[str, list[str]] = {}

    def watcher(name: str) -> None:
        got[name] = [e.key for e in store.watch("a/", rev, 20.0)]
    threads = [threading.Thread(target=watcher, args=(n,)) for n in ("w1", "w2")]
    for t in threads:
        t.start()
    time.sleep(0.2)
    store.put_many({"a/x": b"1"})
    for t in threads:
        t.join(timeout=30)
    assert got == {"w1": ["a/x"], "w2": ["a/x"]}
    assert len(store._instances) == 2
    store.close()


def test_threads_past_the_limit_poll_and_still_see_writes(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"))
    store.max_notify_threads = 1
    rev = store.revision()
    got: dict[str, list[str]] = {}

    def watcher(name: str) -> None:
        got[name] = [e.key for e in store.watch("a/", rev, 20.0)]
    for n in ("w1", "w2", "w3"):
        threading.Thread(target=watcher, args=(n,)).start()
    time.sleep(0.2)
    store.put_many({"a/x": b"1"})
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == {"w1": ["a/x"], "w2": ["a/x"], "w3": ["a/x"]}
    assert len(store._instances) == 1, "more inotify instances than the store may take"
    store.close()


def test_without_inotify_the_watch_polls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a: object) -> None:
        raise OSError(24, "inotify_init1: Too many open files")
    monkeypatch.setattr("crosszone.store.sqlite_store.DirChanges", refuse)
    store = SqliteStore(str(tmp_path / "s.db"))
    rev = store.revision()
    t = threading.Timer(0.2, lambda: store.put_many({"a/x": b"1"}))
    t.start()
    assert [e.key for e in store.watch("a/", rev, 20.0)] == ["a/x"]
    t.join()
    store.close()


def _inotify_fds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed since
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:inotify"
    return n


def test_close_and_garbage_collection_close_the_inotify_instances(tmp_path: Path) -> None:
    gc.collect()  # stores other tests left to the collector
    before = _inotify_fds()
    store = SqliteStore(str(tmp_path / "s.db"))
    store.watch("a/", store.revision(), 0.01)
    store.watch("a/", store.revision(), 0.01)
    assert _inotify_fds() == before + 1  # one per thread, kept between watches
    store.close()
    assert _inotify_fds() == before
    store = SqliteStore(str(tmp_path / "s.db"))
    store.watch("a/", store.revision(), 0.01)
    del store
    gc.collect()
    assert _inotify_fds() == before
