"""The control state on a real three-member etcd cluster survives a member killed mid-change.

A writer applies intent changes through the store API while three agents (the real reconcile
loop, a DictSink for a fast path) watch, each starting on a different member; one member is
SIGKILLed (a follower, or the leader) while the changes go on. Every write must succeed (the
store fails over, bounded), every agent must converge to the last written revision with the same
maps as a fresh agent, and each agent's watch must deliver exactly the cluster's event log after
its start revision: no revision skipped, none twice.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from crosszone.agent.agent import Agent
from crosszone.compile.diff import DictSink
from crosszone.intent.cluster import load_cluster, parse_cluster, to_document
from crosszone.store.etcd_store import EtcdStore
from crosszone.store.objects import split_cluster
from crosszone.store.store import INTENT, Event, open_store
from etcd_fixture import EtcdCluster, etcd_cluster  # noqa: F401  (fixture)

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "examples" / "cluster.yaml")
CHANGES = 24
KILL_AFTER = 8


def _variant(i: int) -> dict[str, bytes]:
    """The example intent with one more pool prefix (a different one per change)."""
    d = to_document(CLUSTER)
    d["storage_pools"][1]["prefixes"] += f"\n10.{200 + i // 250}.{i % 250}.0/24"
    return split_cluster(parse_cluster(yaml.safe_dump(d)))


def _until(cond: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds} s: {what}")
        time.sleep(0.02)


def _store(cluster: EtcdCluster, first: int, root: str) -> EtcdStore:
    """A store over every member, starting with member `first`."""
    order = cluster.urls[first:] + cluster.urls[:first]
    s = open_store("etcd://" + ",".join(u.split("://", 1)[1] for u in order))
    assert isinstance(s, EtcdStore) and s.base_url == cluster.urls[first]
    s.root = root
    return s


class _Watched:
    """An agent in a thread, recording every event its store's watch handed it."""

    def __init__(self, name: str, store: EtcdStore) -> None:
        self.store = store
        self.events: list[Event] = []
        self.start_revision: int | None = None
        self.errors: list[Exception] = []
        self.sink = DictSink()
        self.agent = Agent(name, store, self.sink, lambda _name: 5, status_every=3600)
        inner = store.watch

        def watch(prefix: str, after: int, timeout: float) -> list[Event]:
            if self.start_revision is None:
                self.start_revision = after
            try:
                got = inner(prefix, after, timeout)
            except Exception as exc:
                self.errors.append(exc)
                raise
            self.events += got
            return got
        store.watch = watch  # type: ignore[method-assign]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.agent.run, args=(self.stop.is_set,),
                                       daemon=True)


@pytest.mark.parametrize("victim", ["follower", "leader"])
def test_member_killed_while_changes_apply(etcd_cluster: EtcdCluster, victim: str) -> None:  # noqa: F811
    cluster = etcd_cluster
    leader = cluster.leader()
    dead = leader if victim == "leader" else (leader + 1) % 3
    root = f"/cluster{time.monotonic_ns()}/"
    writer = _store(cluster, dead, root)  # the writer's requests go to the victim first
    variants = [_variant(i) for i in range(CHANGES + 1)]
    writer.put_many({INTENT + k: v for k, v in variants[0].items()})
    # agent i watches member i first: one of them watches the victim when it dies
    agents = [_Watched(name, _store(cluster, i, root))
              for i, name in enumerate(["gw-a", "gw-b", "gw-a"])]
    try:
        for a in agents:
            a.thread.start()
        _until(lambda: all(a.agent.rec.revision > 0 and a.start_revision is not None
                           for a in agents), 30, "every agent loaded the first intent")

        written: list[int] = []
        failures: list[BaseException] = []

        def write() -> None:
            try:
                for prev, cur in itertools.pairwise(variants):
                    change = {INTENT + k: v for k, v in cur.items() if prev.get(k) != v}
                    change.update({INTENT + k: None for k in prev if k not in cur})
                    written.append(writer.put_many(change))
            except BaseException as exc:
                failures.append(exc)
        t = threading.Thread(target=write, daemon=True)
        t.start()
        _until(lambda: len(written) >= KILL_AFTER or bool(failures), 60,
               f"{KILL_AFTER} changes written before the kill")
        cluster.kill(dead)  # SIGKILL while the writer goes on
        t.join(120)
        assert not t.is_alive(), "the writer hung"
        assert not failures, f"a write failed after the kill: {failures[0]!r}"
        assert len(written) == CHANGES and written == sorted(set(written))
        assert writer.base_url != cluster.urls[dead]
        assert cluster.leader() != dead

        last = written[-1]
        _until(lambda: all(a.agent.rec.revision == last for a in agents), 60,
               f"every agent at revision {last}: {[a.agent.rec.revision for a in agents]}")
    finally:
        for a in agents:
            a.stop.set()
        for a in agents:
            a.thread.join(30)
    assert not any(a.thread.is_alive() for a in agents)

    # the cluster's own log of intent changes, read from a live member
    log_store = _store(cluster, (dead + 1) % 3, root)
    first = min(a.start_revision or 0 for a in agents)
    log: list[Event] = []
    while not log or log[-1].revision < last:
        got = log_store.watch(INTENT, log[-1].revision if log else first, 5)
        assert got, f"the log stops at {log[-1].revision if log else first}, not {last}"
        log += got
    assert set(written) <= {e.revision for e in log}

    fresh_sink = DictSink()
    fresh = Agent("gw-a", log_store, fresh_sink, lambda _name: 5)
    fresh.start()  # reads at the store's revision (agents' status writes come after `last`)
    assert fresh.rec.revision >= last and fresh.health == "ok"
    for a in agents:
        assert a.start_revision is not None
        revs = [e.revision for e in a.events]
        assert revs == sorted(revs), "events out of order"
        assert a.events == [e for e in log if e.revision > a.start_revision], \
            "a watch skipped or repeated an event"
        assert a.agent.rec.rejected == 0
        assert a.agent.rec.revision == last
    for a in agents[::2]:  # both gw-a agents hold what a fresh gw-a agent writes
        assert {k: dict(v) for k, v in a.sink.entries.items()} == \
            {k: dict(v) for k, v in fresh_sink.entries.items()}
    # the agent that watched the victim first moved its stream to a live member
    assert agents[dead].store.base_url != cluster.urls[dead]
    for s in [writer, log_store, *(a.store for a in agents)]:
        s.close()
