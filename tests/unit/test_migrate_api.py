"""The controller's migration endpoints: open reads in the contract's shape, token-guarded
operations queued for the runner, refusals as 409 with the state named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from crosszone.control.api import create_app
from crosszone.control.service import Controller
from crosszone.migrate import engine as eng
from crosszone.migrate.plan import Plan
from crosszone.store.sqlite_store import SqliteStore
from unit.test_migrate_engine import FakeDriver
from unit.test_migrate_robust import BAD_PLANS, POISONED

AUTH = {"Authorization": "Bearer s3cret"}


@pytest.fixture
def setup(tmp_path: Path):
    store = SqliteStore(str(tmp_path / "s.db"), poll_s=0.001)
    return store, TestClient(create_app(Controller(store), "s3cret"))


def test_status_is_none_before_any_migration(setup) -> None:
    _, api = setup
    doc = api.get("/v1/migration").json()
    assert doc["state"] == "none" and doc["history"] == [] and doc["guards"] == []
    assert {"step", "weight_new"} <= set(doc)


def test_operations_need_the_token_and_are_queued(setup) -> None:
    store, api = setup
    plan = Plan(canary="b", steps=(10, 100)).to_json()
    assert api.post("/v1/migration/start", json=plan).status_code == 401
    assert store.get_prefix(eng.OP_PREFIX)[0] == {}
    r = api.post("/v1/migration/start", json=plan, headers=AUTH)
    assert r.status_code == 200 and r.json()["queued"] == "start"
    assert r.json()["runner_alive"] is False
    op = r.json()["op"]
    cmd = json.loads(store.get(eng.OP_PREFIX + op["id"]) or b"{}")
    assert cmd["op"] == "start" and cmd["plan"]["steps"] == [10, 100]
    assert cmd["reason"] == "controller API" and cmd["status"] == "queued"
    assert cmd["runner"] is None  # no runner alive: the next runner expires it
    got = api.get(f"/v1/migration/ops/{op['id']}").json()
    assert got["op"] == "start" and got["status"] == "queued"
    assert api.get("/v1/migration/ops/nope").status_code == 404


def test_operation_that_does_not_apply_is_409(setup) -> None:
    _, api = setup
    r = api.post("/v1/migration/finish", headers=AUTH)
    assert r.status_code == 409 and "state 'none'" in r.json()["detail"]
    assert api.post("/v1/migration/teleport", headers=AUTH).status_code == 404
    bad = api.post("/v1/migration/start", content=b"{\"steps\": 3}", headers=AUTH)
    assert bad.status_code == 422


def test_status_follows_the_store(setup) -> None:
    store, api = setup
    st = eng.State(state="shifting", step=2, weight_new=25, plan=Plan().to_json(),
                   guards=[{"name": "errors", "value": 0, "limit": 0, "ok": True}])
    store.put(eng.KEY, json.dumps(st.to_json()).encode())
    doc = api.get("/v1/migration").json()
    assert (doc["state"], doc["step"], doc["weight_new"]) == ("shifting", 2, 25)
    assert doc["guards"][0]["ok"] is True
    r = api.post("/v1/migration/pause", headers=AUTH)
    assert r.status_code == 200
    assert json.loads(store.get(eng.OP_PREFIX + r.json()["op"]["id"]) or b"{}")["op"] == "pause"


# ---- issue 25: plans refused with the field, hostile stored values never a 500 -----------------

@pytest.mark.parametrize("change, field", BAD_PLANS)
def test_every_bad_plan_is_a_422_naming_the_field_and_nothing_is_queued(
        setup, change: dict, field: str) -> None:
    store, api = setup
    body = json.dumps({**Plan(canary="b", steps=(10, 100)).to_json(), **change})
    r = api.post("/v1/migration/start", content=body.encode(), headers=AUTH)
    assert r.status_code == 422, r.text
    assert r.json()["detail"].startswith(field)
    assert store.get_prefix(eng.OP_PREFIX)[0] == {}


@pytest.mark.parametrize("body", [b"[" * 100_000, b"{\"steps\": " + b"[" * 100_000, b"[]",
                                  b"\"abc\"", b"\xff\xfe"])
def test_a_body_that_is_no_plan_is_a_4xx(setup, body: bytes) -> None:
    store, api = setup
    r = api.post("/v1/migration/start", content=body, headers=AUTH)
    assert r.status_code == 422 and "plan" in r.json()["detail"]
    assert store.get_prefix(eng.OP_PREFIX)[0] == {}


@pytest.mark.parametrize("raw", POISONED, ids=range(len(POISONED)))
def test_a_hostile_stored_state_is_reported_not_a_500(setup, raw: bytes) -> None:
    store, api = setup
    store.put(eng.KEY, raw)
    r = api.get("/v1/migration")
    assert r.status_code == 200 and r.json()["error"]
    for op in ("pause", "resume", "rollback", "finish", "start"):
        r = api.post(f"/v1/migration/{op}", headers=AUTH)
        assert r.status_code == 409 and "cannot " + op in r.json()["detail"]
    assert store.get_prefix(eng.OP_PREFIX)[0] == {}
    assert store.get(eng.KEY) == raw


@pytest.mark.parametrize("raw", [b"[]", b"[" * 100_000, b"{\"owner\": 1, \"expires\": 1}",
                                 b"{\"owner\": {\"host\": \"h\", \"pid\": 1, \"nonce\": \"n\"}, "
                                 b"\"expires\": \"x\"}", b"null", b"\xff"])
def test_a_hostile_runner_value_is_no_runner(setup, raw: bytes) -> None:
    store, api = setup
    store.put(eng.RUNNER, raw)
    doc = api.get("/v1/migration").json()
    assert doc["runner"] is None and doc["runner_alive"] is False
    r = api.post("/v1/migration/start", json=Plan(steps=(10, 100)).to_json(), headers=AUTH)
    assert r.status_code == 200 and r.json()["op"]["runner"] is None
    st = eng.State(state="shifting", step=1, weight_new=10, plan=Plan().to_json())
    store.put(eng.KEY, json.dumps(st.to_json()).encode())
    assert api.post("/v1/migration/pause", headers=AUTH).status_code == 200


def test_an_operation_is_answered_through_the_api(setup) -> None:
    store, api = setup
    e = eng.Engine(store, FakeDriver())  # the wall clock, as the controller's
    e.acquire()  # `crosszone migrate run`
    r = api.post("/v1/migration/start", json=Plan(canary="b", steps=(10, 100)).to_json(),
                 headers=AUTH)
    assert r.status_code == 200 and r.json()["runner_alive"] is True
    op_id = r.json()["op"]["id"]
    assert api.get(f"/v1/migration/ops/{op_id}").json()["status"] == "queued"
    other = api.post("/v1/migration/start", json=Plan(steps=(100,)).to_json(), headers=AUTH)
    assert other.status_code == 409 and f"another start is queued already (operation {op_id}" \
        in other.json()["detail"]  # two starts: exactly one is taken
    e.tick()
    got = api.get(f"/v1/migration/ops/{op_id}").json()
    assert got["status"] == "done" and got["state"] == "canary"
    r2 = api.post("/v1/migration/start", json=Plan(steps=(100,)).to_json(), headers=AUTH)
    assert r2.status_code == 409 and "already under way" in r2.json()["detail"]
