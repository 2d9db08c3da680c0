"""Agents never die on a revision; the SQLite log stays bounded (issue 12, findings 3 and 7).

Every bad revision (wrong-typed objects, a failing map write, an error nobody foresaw) is
rejected on its own: the maps keep the last good state, the rejection is counted by stage and
logged, and the next good revision applies. An idle agent adds status rows only as a slow
heartbeat, the log is compacted as it grows, and an agent whose revision was compacted away
reads the whole state again instead of failing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from crosszone.agent.agent import Agent
from crosszone.agent.reconcile import Reconciler
from crosszone.compile.diff import DictSink, MapOp
from crosszone.intent.cluster import load_cluster, parse_cluster, to_document
from crosszone.store.objects import CORE, split_cluster
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT, STATUS, RevisionCompacted

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(ROOT / "examples" / "cluster.yaml")
OBJS = split_cluster(CLUSTER)
IFX = (lambda name: 5)  # noqa: E731


def _with_extra_prefix(prefix: str) -> dict[str, bytes]:
    d = to_document(CLUSTER)
    d["storage_pools"][1]["prefixes"] += f"\n{prefix}"
    return split_cluster(parse_cluster(yaml.safe_dump(d)))


def _snapshot(entries: dict) -> dict:
    return {k: dict(v) for k, v in entries.items()}


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


@pytest.fixture
def setup(tmp_path: Path):
    store = SqliteStore(str(tmp_path / "s.db"))
    store.put_many({INTENT + k: v for k, v in OBJS.items()})
    sink = DictSink()
    clock = _Clock()
    agent = Agent("gw-a", store, sink, IFX, now=clock.now, sleep=clock.sleep)
    assert agent.step(0).mode == "full"  # type: ignore[union-attr]
    yield store, sink, agent, clock
    store.close()


BAD_CORES = [b"[]", b'{"storage_pools": 5}', b"[" * 100_000 + b"]" * 100_000, b"\xff\xfe",
             b'{"version": 2, "gateways": ', b"null", b'{"storage_pools": [{"name": []}]}']


def test_wrong_typed_objects_are_rejected_one_revision_each(setup, caplog) -> None:
    store, sink, agent, _ = setup
    good = agent.rec.revision
    before = _snapshot(sink.entries)
    caplog.set_level(logging.WARNING, logger="crosszone.agent")
    for i, core in enumerate(BAD_CORES):
        store.put(INTENT + CORE, core)
        res = agent.step(0)
        assert res is not None and res.mode == "rejected", core[:30]
        assert agent.rec.revision == good and agent.health == "rejecting"
        assert _snapshot(sink.entries) == before
        assert float(agent.metrics.rejected._value.get()) == i + 1
    for key, value in [("pool/checkpoints/007", b"\xff"), ("hosts/001", b"no such host line")]:
        store.put(INTENT + key, value)
        assert agent.step(0).mode == "rejected"  # type: ignore[union-attr]
    assert _snapshot(sink.entries) == before
    assert agent.metrics.rejected_by_stage.labels("validate")._value.get() == len(BAD_CORES) + 2
    assert sum("rejected" in r.getMessage() for r in caplog.records) == len(BAD_CORES) + 2
    # the status in the store says so, once the agent has nothing more to do
    assert agent.step(0) is None
    status = json.loads(store.get(STATUS + "gw-a") or b"{}")
    assert status["health"] == "rejecting" and status["revision"] == good
    # a good revision repairs every object and applies
    new = _with_extra_prefix("10.99.0.0/24")
    rev = store.put_many({INTENT + k: new.get(k) for k in set(new) | set(OBJS)
                          | {"pool/checkpoints/007", "hosts/001"}})
    res = agent.step(0)
    assert res is not None and res.mode == "full" and agent.rec.revision == rev
    assert agent.health == "ok"


class _FailingSink(DictSink):
    """Fails the n-th batch after applying half of it (a map full halfway through)."""

    def __init__(self, entries: dict, fail_at: int) -> None:
        super().__init__(entries)
        self.fail_at, self.n = fail_at, 0

    def apply(self, op: MapOp) -> None:
        self.n += 1
        if self.n == self.fail_at:
            half = len(op.keys) // 2
            super().apply(MapOp(op.kind, op.map, list(op.keys)[:half],
                                list(op.values)[:half] if op.values else []))
            raise OSError(28, "No space left on device")
        super().apply(op)


def _loaded_with(fail_at: int) -> tuple[Reconciler, _FailingSink, dict]:
    sink = DictSink()
    r = Reconciler("gw-a", sink, IFX)
    r.load(OBJS, 1)
    failing = _FailingSink(sink.entries, fail_at)
    r.sink = failing
    return r, failing, _snapshot(sink.entries)


def _events(rev: int, old: dict, new: dict) -> list:
    from crosszone.store.objects import diff_objects
    from crosszone.store.store import Event

    return [Event(rev, k, v) for k, v in diff_objects(old, new).writes.items()]


def test_failed_map_write_in_a_delta_is_undone_and_rejected() -> None:
    r, failing, before = _loaded_with(1)
    new = _with_extra_prefix("10.99.0.0/24")
    res = r.on_events(_events(2, OBJS, new))
    assert res is not None and res.mode == "rejected" and res.stage == "apply", res
    assert _snapshot(failing.entries) == before and _snapshot(r.entries) == before
    assert r.revision == 1 and r.seen == 2 and not r.suspect
    # the same change again, now that the map has room: applies (full, as the base moved)
    failing.fail_at = 0
    res = r.on_events(_events(3, new, _with_extra_prefix("10.98.0.0/24")))
    assert res is not None and res.mode == "full"


@pytest.mark.parametrize("fail_at", [1, 2, 3, 4])
def test_failed_map_write_in_a_full_reconcile_is_undone_and_rejected(fail_at: int) -> None:
    r, failing, before = _loaded_with(fail_at)
    d = to_document(CLUSTER)
    d["vpcs"][0]["vni"] = 4242
    d["storage_pools"][1]["prefixes"] += "\n10.99.0.0/24"
    other = split_cluster(parse_cluster(yaml.safe_dump(d)))
    res = r.on_events(_events(2, OBJS, other))
    assert res is not None and res.mode == "rejected" and res.stage == "apply", res
    assert _snapshot(failing.entries) == before and r.revision == 1


def test_an_unforeseen_error_rejects_the_revision_and_the_agent_goes_on(setup) -> None:
    store, sink, agent, _ = setup
    before = _snapshot(sink.entries)
    real = agent.rec.on_events

    def boom(events):  # a bug anywhere below the agent's loop
        raise RuntimeError("bug")
    agent.rec.on_events = boom  # type: ignore[method-assign]
    rev = store.put(INTENT + CORE, OBJS[CORE])
    res = agent.step(0)
    assert res is not None and res.mode == "rejected" and res.stage == "internal"
    assert agent.rec.seen == rev and _snapshot(sink.entries) == before
    assert agent.metrics.rejected_by_stage.labels("internal")._value.get() == 1
    agent.rec.on_events = real  # type: ignore[method-assign]
    new = _with_extra_prefix("10.99.0.0/24")
    store.put_many({INTENT + k: v for k, v in new.items() if OBJS.get(k) != v})
    assert agent.step(0).mode in ("delta", "full")  # type: ignore[union-attr]


def test_idle_agent_writes_status_only_as_a_heartbeat(setup) -> None:
    store, _, agent, clock = setup
    rows = store.log_rows()
    for _ in range(300):  # five idle minutes of one-second ticks
        agent.step(0)
        clock.t += 1.0
    added = store.log_rows() - rows
    assert added <= 300 / agent.status_every + 1, added
    # a change is reported as soon as the agent is idle, not at the next heartbeat
    store.put(INTENT + CORE, b"[]")
    agent.step(0)
    agent.step(0)
    assert json.loads(store.get(STATUS + "gw-a") or b"{}")["health"] == "rejecting"


def test_a_one_shot_agent_leaves_the_running_agents_status_alone(tmp_path: Path) -> None:
    """`crosszone agent --once` (an upgrade's reattach beside the gateway's running agent)
    reconciles but writes no status/<gateway>: the running agent's report (its routing mode,
    its fast-path verdict) is what the migration's runner and parity read."""
    store = SqliteStore(str(tmp_path / "s.db"))
    store.put_many({INTENT + k: v for k, v in OBJS.items()})
    running = {"health": "ok", "routing": {"mode": "managed"}}
    store.put(STATUS + "gw-a", json.dumps(running).encode())
    once = Agent("gw-a", store, DictSink(), IFX)
    once.publish = False
    assert once.step(0).mode == "full"  # type: ignore[union-attr]
    once.report(force=True)
    assert json.loads(store.get(STATUS + "gw-a") or b"{}") == running
    once.publish = True  # a daemon agent does report
    once.report(force=True)
    assert json.loads(store.get(STATUS + "gw-a") or b"{}")["routing"]["mode"] == "off"
    store.close()


def test_no_status_commit_between_changes_that_stream_in(setup) -> None:
    """While every watch brings a new revision, status waits (it would delay the next one)."""
    store, _, agent, clock = setup
    agent.status_busy_every = 5.0
    agent.step(0)
    rows = store.log_rows()
    for i in range(20):
        new = _with_extra_prefix(f"10.{90 + i}.0.0/24")
        store.put_many({INTENT + k: v for k, v in new.items() if OBJS.get(k) != v})
        assert agent.step(0) is not None
        clock.t += 0.1
    assert store.log_rows() - rows == 20 * 1  # only the changes themselves
    agent.step(0)  # idle: now the status goes out
    assert json.loads(store.get(STATUS + "gw-a") or b"{}")["revision"] == agent.rec.revision


def test_sqlite_log_is_compacted_and_a_late_watcher_resyncs(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "s.db"), max_log_rows=200)
    try:
        store.put_many({INTENT + k: v for k, v in OBJS.items()})
        sink = DictSink()
        agent = Agent("gw-a", store, sink, IFX)
        agent.step(0)
        behind = agent.rec.seen
        for i in range(2000):
            store.put(STATUS + f"other{i % 3}", str(i).encode())
        assert store.log_rows() <= 200 + 200 // 4
        with pytest.raises(RevisionCompacted):
            store.watch(INTENT, behind, 0)
        # the late agent meanwhile missed an intent change
        new = _with_extra_prefix("10.99.0.0/24")
        rev = store.put_many({INTENT + k: v for k, v in new.items() if OBJS.get(k) != v})
        assert agent.step(0) is None and agent.metrics.resyncs._value.get() == 1
        res = agent.step(0)
        assert res is not None and res.mode == "full" and agent.rec.revision == rev
        from crosszone.compile.gateway import compile_gateway
        from crosszone.store.objects import join_objects

        want = compile_gateway(join_objects(new), "gw-a", IFX, agent.rec.ids).entries
        assert sink.entries["routes4"] == want["routes4"]  # the missed change is there
        assert agent.step(0) is None  # and then it watches again, from the new revision
    finally:
        store.close()


def test_first_idle_moment_after_a_full_load_warms_the_route_dicts(setup) -> None:
    """The first one-route change after a full load must not build the route dicts (1.8 s at
    1M routes): the agent builds them, and freezes the collector, while idle."""
    import gc

    from crosszone.compile.encode import Records

    _, _, agent, _ = setup
    try:
        assert agent.warming
        bulk = [m for m in agent.rec.entries.values() if isinstance(m, Records)]
        assert bulk and all(m._dict is None for m in bulk)
        assert agent.step(0) is None
        assert not agent.warming and all(m._dict is not None for m in bulk)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_cluster_after_deltas_holds_the_new_prefixes() -> None:
    """The delta path leaves the pools' prefixes to be rebuilt on demand; they are current."""
    r, _, _ = _loaded_with(0)
    new = _with_extra_prefix("10.99.0.0/24")
    assert r.on_events(_events(2, OBJS, new)).mode == "delta"  # type: ignore[union-attr]
    newer = _with_extra_prefix("10.98.0.0/24")
    res = r.on_events(_events(3, new, {**new, **{k: v for k, v in newer.items()
                                                 if k.startswith("pool/")}}))
    assert res is not None and res.mode == "delta"
    assert r.cluster is not None
    pool = r.cluster.storage_pools[1]
    have = {str(n) for n in pool.prefixes.networks()}
    assert {"10.99.0.0/24", "10.98.0.0/24"} <= have


DEEP = b"[" * 100_000 + b"]" * 100_000


def test_first_start_waits_for_a_valid_intent_saying_why(tmp_path: Path, monkeypatch) -> None:
    """Issue 26, point 3: with no pinned maps (first start, or after a reboot) an agent whose
    store holds no intent, `intent/core` = `[]`, 100k-deep JSON, a pool chunk without a core,
    or an intent without its gateway, waits: status `waiting` / `rejecting` with the reason,
    and it attaches once a valid intent arrives (before: InvalidIntentError ended it)."""
    from crosszone.agent.agent import ensure_attached
    from crosszone.fastpath import deploy

    attached: list = []
    monkeypatch.setattr(deploy, "attach_tables",
                        lambda tables, pins, netns, write_tables: attached.append(tables))
    store = SqliteStore(str(tmp_path / "s.db"))
    no_gw = to_document(CLUSTER)
    no_gw["gateways"] = [g for g in no_gw["gateways"] if g["name"] != "gw-a"]
    for v in no_gw["vpcs"]:
        v.pop("gateways", None)
    # what the store holds at each try: the agent reads, fails, sleeps, reads the next
    states: list[dict[str, bytes | None]] = [
        {CORE: b"[]"}, {CORE: DEEP}, {CORE: None, "pool/checkpoints/007": b"10.1.0.0/16"},
        {CORE: split_cluster(parse_cluster(yaml.safe_dump(no_gw)))[CORE],
         "pool/checkpoints/007": None},
        dict(OBJS)]
    seen: list[tuple[str, str, dict]] = []
    said: list[tuple[str, str]] = []

    def sleep(_s: float) -> None:
        status = json.loads(store.get(STATUS + "gw-a") or b"{}")
        seen.append((status.get("health"), status.get("message"), status))
        store.put_many({INTENT + k: v for k, v in states.pop(0).items()})

    try:
        assert ensure_attached(store, "gw-a", tmp_path / "pins", None, sleep=sleep,
                               on_wait=lambda h, m: said.append((h, m))) is True
        assert not states and len(attached) == 1  # attached after the valid intent, once
        healths = [h for h, _m, _s in seen]
        assert healths == ["waiting", "rejecting", "rejecting", "rejecting", "rejecting"], seen
        messages = [m for _h, m, _s in seen]
        assert "no intent in the store yet" in messages[0]
        assert "not a JSON object but list" in messages[1]
        assert "nested too deeply" in messages[2]
        assert "no intent stored yet" in messages[3]
        assert "has no gateway 'gw-a'" in messages[4], messages[4]
        assert all(m.startswith("not attached: ") for m in messages)
        assert seen[1][2]["revision"] is None and seen[1][2]["rejected"] == 0
        assert [h for h, _m in said] == healths[:len(said)] and len(said) == len(seen)
    finally:
        store.close()


def test_first_start_with_the_store_down_says_so(tmp_path: Path, monkeypatch) -> None:
    from crosszone.agent.agent import ensure_attached
    from crosszone.fastpath import deploy
    from crosszone.store.store import StoreUnavailable

    monkeypatch.setattr(deploy, "attach_tables", lambda *a, **k: None)
    store = SqliteStore(str(tmp_path / "s.db"))
    real = store.get_prefix
    down = [True, True]

    def get_prefix(prefix: str):
        if down:
            down.pop()
            raise StoreUnavailable("connection refused")
        return real(prefix)
    monkeypatch.setattr(store, "get_prefix", get_prefix)
    store.put_many({INTENT + k: v for k, v in OBJS.items()})
    said: list[tuple[str, str]] = []
    try:
        assert ensure_attached(store, "gw-a", tmp_path / "pins", None, sleep=lambda s: None,
                               on_wait=lambda h, m: said.append((h, m)))
        assert said == [("degraded", "not attached: store unreachable: connection refused")]
    finally:
        store.close()
