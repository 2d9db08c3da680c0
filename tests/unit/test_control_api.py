"""The controller API (token, apply, dry run, 422s, prefix changes, status) and the agent loop
over a real store with a fake sink (store outage with injected time)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fastapi.testclient import TestClient

from crosszone.agent.agent import Agent, Backoff
from crosszone.compile.diff import DictSink
from crosszone.compile.gateway import compile_gateway
from crosszone.control.api import create_app
from crosszone.control.service import Controller
from crosszone.intent.cluster import load_cluster, parse_cluster
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import StoreUnavailable
from unit.test_diff import same_state

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "examples" / "cluster.yaml"
AUTH = {"Authorization": "Bearer s3cret"}
IFX = (lambda name: 5)  # noqa: E731


@pytest.fixture
def setup(tmp_path: Path):
    store = SqliteStore(str(tmp_path / "s.db"), poll_s=0.001)
    ctl = Controller(store)
    return store, ctl, TestClient(create_app(ctl, "s3cret"))


def test_writes_need_the_token(setup) -> None:
    _, _, api = setup
    text = CLUSTER.read_text()
    assert api.post("/v1/intent", content=text).status_code == 401
    assert api.post("/v1/intent", content=text,
                    headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert api.post("/v1/pools/p/prefixes", json={"add": []}).status_code == 401
    assert api.get("/v1/status").status_code == 200  # reads are open
    assert "/v1/intent" in api.get("/openapi.json").json()["paths"]


def test_apply_dry_run_then_apply(setup) -> None:
    store, _ctl, api = setup
    text = CLUSTER.read_text()
    dry = api.post("/v1/intent", params={"dry_run": True}, content=text, headers=AUTH).json()
    assert dry["revision"] is None and dry["gateways"]["gw-a"]["put"]["routes4"] == 7
    assert store.get_prefix("intent/")[0] == {}
    out = api.post("/v1/intent", content=text, headers=AUTH).json()
    assert out["revision"] >= 1 and "core" in out["changed"]
    again = api.post("/v1/intent", content=text, headers=AUTH).json()
    assert again["revision"] is None and again["changed"] == []
    got = api.get("/v1/intent").json()
    assert parse_cluster(yaml.safe_dump(got["intent"])) == load_cluster(CLUSTER)


def test_rejected_intent_is_422_and_writes_nothing(setup) -> None:
    store, _, api = setup
    api.post("/v1/intent", content=CLUSTER.read_text(), headers=AUTH)
    rev = store.revision()
    bad = CLUSTER.read_text().replace("vni: 1002", "vni: 1001")
    r = api.post("/v1/intent", content=bad, headers=AUTH)
    assert r.status_code == 422 and "vpcs[1].vni" in r.json()["detail"]
    assert store.revision() == rev
    assert api.post("/v1/intent", content=b"\xff\xfe", headers=AUTH).status_code == 422


def test_prefix_changes(setup) -> None:
    store, ctl, api = setup
    assert api.post("/v1/pools/checkpoints/prefixes", json={"add": ["10.1.0.0/16"]},
                    headers=AUTH).status_code == 422  # no intent yet
    api.post("/v1/intent", content=CLUSTER.read_text(), headers=AUTH)
    r = api.post("/v1/pools/checkpoints/prefixes", json={"add": ["10.1.0.0/16"]}, headers=AUTH)
    assert r.status_code == 200 and len(r.json()["changed"]) == 1
    for body, why in (({"add": ["10.1.0.0/16"]}, "already in the pool"),
                      ({"remove": ["10.2.0.0/16"]}, "not in the pool"),
                      ({"add": ["172.16.0.0/16"]}, "already a route"),
                      ({"add": ["192.168.3.0/24"]}, "overlaps the address space"),
                      ({"add": ["10.1.0.1/16"]}, "host bits")):
        r = api.post("/v1/pools/checkpoints/prefixes", json=body, headers=AUTH)
        assert r.status_code == 422 and why in r.json()["detail"], r.json()
    assert api.post("/v1/pools/nope/prefixes", json={"add": []},
                    headers=AUTH).status_code == 422
    r = api.post("/v1/pools/checkpoints/prefixes", json={"remove": ["10.1.0.0/16"]},
                 headers=AUTH)
    assert r.status_code == 200
    # A fresh controller sees exactly the stored state.
    from crosszone.store.objects import split_cluster

    assert split_cluster(Controller(store).cluster) == split_cluster(ctl.cluster)


def test_agent_follows_the_controller_and_reports(setup) -> None:
    store, ctl, api = setup
    sink = DictSink()
    agent = Agent("gw-b", store, sink, IFX)
    assert agent.step(0.01) is None and agent.health == "waiting"
    api.post("/v1/intent", content=CLUSTER.read_text(), headers=AUTH)
    res = agent.step(0.5)
    assert res is not None and res.mode == "full" and agent.rec.revision == ctl.revision
    api.post("/v1/pools/datasets/prefixes", json={"add": ["172.30.0.0/16"]}, headers=AUTH)
    res = agent.step(0.5)
    assert res is not None and res.mode == "delta" and res.deletes == 0
    want = compile_gateway(ctl.cluster, "gw-b", IFX, agent.rec.ids).entries
    assert same_state(sink.entries, want)
    st = api.get("/v1/status").json()
    assert st["gateways"]["gw-b"]["revision"] == st["desired_revision"]
    assert st["gateways"]["gw-b"]["health"] == "ok"
    assert st["gateways"]["gw-a"]["health"] == "unknown"


def test_agent_judges_a_bad_revision_once(setup) -> None:
    """A revision written past the controller (straight into the store) that does not validate
    is rejected once and kept out; the agent waits for the next revision instead of retrying."""
    from crosszone.agent.agent import INTENT

    store, ctl, _ = setup
    ctl.apply(CLUSTER.read_text())
    sink = DictSink()
    agent = Agent("gw-a", store, sink, IFX)
    assert agent.step(0.01).mode == "full"  # type: ignore[union-attr]
    good = agent.rec.revision
    before = {k: dict(v) for k, v in sink.entries.items()}
    store.put(INTENT + "core", b"{not json")
    assert agent.step(0.2).mode == "rejected"  # type: ignore[union-attr]
    for _ in range(3):
        assert agent.step(0.01) is None
    assert agent.rec.rejected == 1 and agent.rec.revision == good
    assert float(agent.metrics.rejected._value.get()) == 1
    assert sink.entries == before


class FlakyStore(SqliteStore):
    """A store that fails while `down` is set."""

    down = False

    def watch(self, prefix: str, after: int, timeout: float):
        if self.down:
            raise StoreUnavailable("connection refused")
        return super().watch(prefix, after, timeout)

    def put_many(self, items):
        if self.down:
            raise StoreUnavailable("connection refused")
        return super().put_many(items)


def test_store_outage_keeps_state_backs_off_and_recovers(tmp_path: Path) -> None:
    store = FlakyStore(str(tmp_path / "s.db"))
    ctl = Controller(store)
    ctl.apply(CLUSTER.read_text())
    slept: list[float] = []
    clock = [0.0]
    sink = DictSink()
    agent = Agent("gw-a", store, sink, IFX, now=lambda: clock[0],
                  sleep=lambda s: (slept.append(s), clock.__setitem__(0, clock[0] + s)))
    agent.step(0.01)
    before = {k: dict(v) for k, v in sink.entries.items()}
    store.down = True
    for _ in range(10):
        agent.step(0.01)
    assert agent.health == "degraded" and "keeping revision" in agent.message
    assert slept[:4] == [0.05, 0.1, 0.2, 0.4] and max(slept) == 5.0
    assert float(agent.metrics.store_up._value.get()) == 0
    assert sink.entries == before
    store.down = False
    ctl.change_prefixes("checkpoints", ["10.5.0.0/16"], [])
    res = agent.step(0.5)
    assert res is not None and res.mode == "delta" and agent.health == "ok"
    assert agent.backoff.current == 0


def test_backoff() -> None:
    b = Backoff(initial=1, cap=3)
    assert [b.next() for _ in range(4)] == [1, 2, 3, 3]
    b.reset()
    assert b.next() == 1


def test_metrics_exposition(setup) -> None:
    from prometheus_client import generate_latest

    from crosszone.abi.reasons import Reason
    from crosszone.agent.metrics import FastPathCollector

    store, ctl, _ = setup
    ctl.apply(CLUSTER.read_text())
    agent = Agent("gw-a", store, DictSink(), IFX)
    agent.metrics.add_fastpath(FastPathCollector(
        lambda: {"tenant-a": (1, 100, 2, 200)},
        lambda: {Reason.DROP_ROUTE_MISS: (3, 300)}, lambda: {"routes4": 7}))
    agent.step(0.1)
    text = generate_latest(agent.metrics.registry).decode()
    for needle in ('crosszone_vpc_packets_total{direction="to_storage",vpc="tenant-a"} 1.0',
                   'crosszone_verdicts_total{reason="drop_route_miss",verdict="drop"} 3.0',
                   'crosszone_table_entries{table="routes4"} 7.0',
                   "crosszone_applied_revision", "crosszone_reconcile_seconds_bucket"):
        assert needle in text, needle


def _lengths6(lengths: range) -> list[str]:
    """One IPv6 prefix of each length, all inside fd20::/16 (no host bits)."""
    import ipaddress

    return [str(ipaddress.IPv6Network((0xFD20 << 112 | 0xABCD << 96, n), strict=False))
            for n in lengths]


def test_ipv6_prefix_changes_are_fully_validated(setup) -> None:
    """Issue 12 findings 1-2: an IPv6 prefix held by another pool of the same VPC, one already
    present, one removed while absent, and more than CZ_MAX_PLENS6 lengths in one VPC are 422s
    that write nothing; a restarted controller and the checker still accept the stored state."""
    store, ctl, api = setup
    api.post("/v1/intent", content=CLUSTER.read_text(), headers=AUTH)
    rev, before = store.revision(), store.get_prefix("intent/")[0]
    for pool, body, why in (
            ("checkpoints", {"add": ["fd10::/48"]}, "is also defined at storage_pools[0]"),
            ("datasets", {"add": ["fd10::/48"]}, "already in the pool: fd10::/48"),
            ("datasets", {"add": ["fd11::/48", "fd11::/48"]}, "already in the pool"),
            ("datasets", {"remove": ["fd99::/48"]}, "not in the pool: fd99::/48"),
            ("datasets", {"remove": ["fd10::/48", "fd10::/48"]}, "not in the pool"),
            ("datasets", {"remove": ["172.16.0.0/16", "172.16.0.0/16"]}, "not in the pool"),
            ("datasets", {"add": ["fd00:a:0:0:8000::/65"]}, "overlaps the address space")):
        r = api.post(f"/v1/pools/{pool}/prefixes", json=body, headers=AUTH)
        assert r.status_code == 422 and why in r.json()["detail"], (body, r.json())
        assert store.revision() == rev and store.get_prefix("intent/")[0] == before
    # 20 new lengths pass (21 in all with fd10::/48), 20 more would make 41 > 32.
    ok = api.post("/v1/pools/checkpoints/prefixes", json={"add": _lengths6(range(17, 37))},
                  headers=AUTH)
    assert ok.status_code == 200
    rev, before = store.revision(), store.get_prefix("intent/")[0]
    r = api.post("/v1/pools/checkpoints/prefixes", json={"add": _lengths6(range(37, 57))},
                 headers=AUTH)
    assert r.status_code == 422 and "distinct IPv6 prefix lengths" in r.json()["detail"]
    assert store.revision() == rev and store.get_prefix("intent/")[0] == before
    restarted = Controller(store)  # would raise InvalidIntentError on a bad stored state
    from crosszone.store.objects import split_cluster

    assert split_cluster(restarted.cluster) == split_cluster(ctl.cluster)
    parse_cluster(yaml.safe_dump(restarted.document()))


def test_malformed_prefix_change_bodies_are_422(setup) -> None:
    store, _, api = setup
    api.post("/v1/intent", content=CLUSTER.read_text(), headers=AUTH)
    rev = store.revision()
    for body, why in ((b"{not json", "body: Invalid JSON"), (b'{"add": 5}', "add:"),
                      (b'{"add": [], "x": 1}', "x: Extra inputs"), (b"[]", "body:"),
                      (b'{"add": [7]}', "add.0:")):
        r = api.post("/v1/pools/datasets/prefixes", content=body, headers=AUTH)
        assert r.status_code == 422 and why in r.json()["detail"], (body, r.json())
    assert store.revision() == rev


def test_controller_starts_on_an_invalid_stored_intent_and_an_apply_replaces_it(
        tmp_path: Path) -> None:
    """A store holding a wrong-typed core object does not keep the controller down: it serves,
    says what is wrong, refuses prefix changes on it, and the next apply replaces it."""
    store = SqliteStore(str(tmp_path / "s.db"), poll_s=0.001)
    store.put_many({"intent/core": b"[]"})
    ctl = Controller(store)
    assert ctl.cluster is None and "invalid" in (ctl.stored_problem or "")
    api = TestClient(create_app(ctl, "s3cret"))
    assert "invalid" in api.get("/v1/status").json()["stored_problem"]
    r = api.post("/v1/pools/datasets/prefixes", json={"add": ["172.16.9.0/24"]}, headers=AUTH)
    assert r.status_code == 422 and "invalid" in r.text
    assert api.post("/v1/intent", content=CLUSTER.read_text(), headers=AUTH).status_code == 200
    assert ctl.stored_problem is None and "stored_problem" not in api.get("/v1/status").json()
    assert Controller(store).cluster is not None  # a restart reads the replaced state


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]", b"\xff\xfe", b"[" * 100_000])
def test_a_bad_status_value_does_not_break_the_status_endpoint(setup, raw: bytes) -> None:
    store, _, api = setup
    store.put_many({"status/gw-x": raw})
    r = api.get("/v1/status")
    assert r.status_code == 200 and r.json()["gateways"]["gw-x"]["health"] == "unreadable"
