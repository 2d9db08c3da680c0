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
