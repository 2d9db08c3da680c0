"""Compare-and-swap on both store backends (SQLite file, real etcd): the migration's state,
lease and operations are written with it, so two writers that read the same revision cannot
both win."""

from __future__ import annotations

import threading
from pathlib import Path

from crosszone.store.store import Store, open_store


def test_put_if_writes_only_at_the_revision_read(any_store: Store) -> None:
    assert any_store.get_versioned("migration/state") == (None, 0)
    r1 = any_store.put_if("migration/state", b"a", 0)  # absent: created
    assert r1 is not None and any_store.get_versioned("migration/state") == (b"a", r1)
    assert any_store.put_if("migration/state", b"b", 0) is None  # no longer absent
    any_store.put("other/key", b"x")  # another key's write does not change this key's revision
    r2 = any_store.put_if("migration/state", b"b", r1)
    assert r2 is not None and r2 > r1
    assert any_store.put_if("migration/state", b"c", r1) is None  # a stale revision loses
    assert any_store.get("migration/state") == b"b"
    assert any_store.put_if("migration/state", None, r1) is None  # a stale delete too
    assert any_store.put_if("migration/state", None, r2) is not None
    assert any_store.get_versioned("migration/state") == (None, 0)


def test_of_two_writers_that_read_the_same_revision_exactly_one_wins(any_store: Store) -> None:
    _, rev = any_store.get_versioned("migration/runner")
    results: list[int | None] = []
    barrier = threading.Barrier(4)

    def writer(i: int) -> None:
        barrier.wait()
        results.append(any_store.put_if("migration/runner", f"owner-{i}".encode(), rev))

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if r is not None]
    assert len(results) == 4 and len(won) == 1
    value, now = any_store.get_versioned("migration/runner")
    assert now == won[0] and value is not None and value.startswith(b"owner-")


def test_sqlite_put_if_across_two_connections(tmp_path: Path) -> None:
    a = open_store(f"sqlite://{tmp_path}/s.db")
    b = open_store(f"sqlite://{tmp_path}/s.db")
    _, rev = a.get_versioned("k")
    assert a.put_if("k", b"a", rev) is not None
    assert b.put_if("k", b"b", rev) is None  # the other process read the same revision
    assert b.get("k") == b"a"
