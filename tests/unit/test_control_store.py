"""Both store backends behind one interface: revisions, prefixes, deletes, watch (real etcd)."""

from __future__ import annotations

import threading
import time

import pytest

from crosszone.store.store import Store, StoreUnavailable, open_store


def test_revisions_increase_and_group_a_transaction(any_store: Store) -> None:
    r1 = any_store.put_many({"intent/a": b"1", "intent/b": b"2"})
    r2 = any_store.put("intent/a", b"3")
    assert r2 > r1
    items, rev = any_store.get_prefix("intent/")
    assert items == {"intent/a": b"3", "intent/b": b"2"} and rev >= r2
    ev = any_store.watch("intent/", r1 - 1, 1)
    assert [(e.key, e.value) for e in ev if e.revision == r1] == [("intent/a", b"1"),
                                                                  ("intent/b", b"2")]


def test_delete_and_prefix_isolation(any_store: Store) -> None:
    any_store.put_many({"intent/x": b"1", "status/gw": b"s"})
    r = any_store.put_many({"intent/x": None})
    assert any_store.get_prefix("intent/")[0] == {}
    assert any_store.get("status/gw") == b"s"
    ev = any_store.watch("intent/", r - 1, 1)
    assert ev[-1].value is None and ev[-1].key == "intent/x"


def test_watch_waits_then_returns_in_order(any_store: Store) -> None:
    r0 = any_store.put("intent/k", b"0")
    assert any_store.watch("intent/", r0, 0.2) == []

    def later() -> None:
        time.sleep(0.1)
        any_store.put("intent/k", b"1")
        any_store.put("intent/k", b"2")
    threading.Thread(target=later).start()
    got = any_store.watch("intent/", r0, 3)
    time.sleep(0.2)
    got += any_store.watch("intent/", got[-1].revision, 0.5)
    assert [e.value for e in got] == [b"1", b"2"]
    assert [e.revision for e in got] == sorted(e.revision for e in got)


def test_watch_ignores_other_prefixes(any_store: Store) -> None:
    r0 = any_store.put("intent/k", b"0")
    any_store.put("status/gw", b"x")
    assert any_store.watch("intent/", r0, 0.2) == []


def test_unreachable_etcd_is_store_unavailable() -> None:
    from crosszone.store.etcd_store import EtcdStore

    s = EtcdStore("http://127.0.0.1:9", timeout=0.5)
    with pytest.raises(StoreUnavailable):
        s.get_prefix("intent/")
    with pytest.raises(StoreUnavailable):
        s.watch("intent/", 0, 0.1)


def test_bad_urls() -> None:
    with pytest.raises(ValueError):
        open_store("zookeeper://x")
    with pytest.raises(StoreUnavailable):
        open_store("sqlite:///nonexistent-dir/x/y.db")


def test_watch_replays_from_any_revision_and_changes_are_prompt(any_store: Store) -> None:
    r0 = any_store.revision()
    revs = [any_store.put(f"intent/k{i}", str(i).encode()) for i in range(5)]
    assert [e.revision for e in any_store.watch("intent/", r0, 1)] == revs
    # asked again from an earlier revision (an agent that restarted): replayed, in order
    assert [e.revision for e in any_store.watch("intent/", revs[1], 1)] == revs[2:]
    assert any_store.watch("intent/", revs[-1], 0.05) == []
    lat = []
    last = revs[-1]
    for i in range(20):
        t0 = time.perf_counter()
        last = any_store.put("intent/x", str(i).encode())
        got = any_store.watch("intent/", last - 1, 2)
        lat.append(time.perf_counter() - t0)
        assert [e.revision for e in got] == [last]
    assert sorted(lat)[10] < 0.05  # median: milliseconds, not a new stream per change


def test_etcd_watch_keeps_one_stream(etcd_url: str) -> None:
    from crosszone.store.etcd_store import EtcdStore

    s = EtcdStore(etcd_url, root=f"/w{time.monotonic_ns()}/")
    try:
        rev = s.revision()
        s.watch("intent/", rev, 0.01)
        stream = s._stream
        for i in range(5):
            rev = s.put("intent/a", str(i).encode())
            assert [e.revision for e in s.watch("intent/", rev - 1, 2)] == [rev]
        assert s._stream is stream  # the same stream all along
        s.watch("status/", rev, 0.01)  # another prefix: a new stream, the old one closed
        assert s._stream is not stream
        assert stream.thread is not None
        stream.thread.join(3)
        assert not stream.thread.is_alive()
    finally:
        s.close()
