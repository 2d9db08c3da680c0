"""The agent applies its gateway's routing object (`routing/<gateway>`, issue 23 deliverable 2).

The migration's runner writes one object per crosszone gateway; the agent reads its own at
each step, renders it (weight, graceful shutdown, canary, withdraw) into the configuration it
applies, and reports the object's revision once FRR holds it. A restarted agent starts from
the stored object (the weight is in the file a restarted bgpd reads); a broken object is
refused and the last one stays applied. Fake applier, SQLite store, injected time.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crosszone.agent.agent import Agent
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.store import routing
from crosszone.store.routing import GatewayRouting
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT, STATUS
from unit.test_routing_owner import IFX, Clock, FakeApplier, Log, LoggingSink, _objects


def _agent(store: SqliteStore, log: Log, clock: Clock) -> tuple[Agent, RoutingOwner,
                                                                FakeApplier]:
    applier = FakeApplier(log)
    owner = RoutingOwner("gw-a", applier, hostname="h", now=clock.now)
    agent = Agent("gw-a", store, LoggingSink(log), IFX, now=clock.now, sleep=clock.sleep,
                  routing=owner)
    agent.metrics_address = "127.0.0.1:9470"
    return agent, owner, applier


@pytest.fixture
def world(tmp_path: Path):
    store = SqliteStore(str(tmp_path / "s.db"))
    store.put_many({INTENT + k: v for k, v in _objects().items()})
    yield store, Log(), Clock()
    store.close()


def _status(store: SqliteStore) -> dict:
    return json.loads(store.get(STATUS + "gw-a") or b"{}")


def test_the_agent_applies_its_routing_object_and_reports_its_revision(world) -> None:
    store, log, clock = world
    agent, _owner, applier = _agent(store, log, clock)
    agent.step(0)
    st = _status(store)
    assert st["metrics"] == "127.0.0.1:9470"
    assert st["routing"]["state_revision"] is None and st["routing"]["bandwidth_mbps"] is None
    store.put(routing.key("gw-a"), GatewayRouting(revision=7, bandwidth_mbps=1800).to_bytes())
    store.put(routing.key("gw-b"), GatewayRouting(revision=8, withdraw=True).to_bytes())
    agent.step(0)
    assert "set extcommunity bandwidth 1800" in applier.configs[-1]
    st = _status(store)["routing"]  # reported at once, not at the next heartbeat
    assert (st["state_revision"], st["bandwidth_mbps"], st["withdraw"]) == (7, 1800, False)
    # graceful shutdown, then the canary alone
    store.put(routing.key("gw-a"), GatewayRouting(revision=9, graceful_shutdown=True)
              .to_bytes())
    agent.step(0)
    assert "bgp graceful-shutdown" in applier.configs[-1]
    assert "set extcommunity bandwidth" not in applier.configs[-1]
    store.put(routing.key("gw-a"), GatewayRouting(revision=10, canary="only",
                                                  canary_vpcs=("tenant-b",)).to_bytes())
    agent.step(0)
    st = _status(store)["routing"]
    assert st["state_revision"] == 10 and st["canary"] == "only"
    assert "10.0.0.100/32" not in st["announced"]  # no anycast VTEP during the canary
    # the same state again under a new revision (a resumed runner): reported, FRR unchanged
    n = len(applier.configs)
    store.put(routing.key("gw-a"), GatewayRouting(revision=11, canary="only",
                                                  canary_vpcs=("tenant-b",)).to_bytes())
    agent.step(0)
    assert _status(store)["routing"]["state_revision"] == 11
    assert applier.configs[n:] == [applier.configs[n - 1]]  # one comparison, same text
    # the object removed: back to the default (everything, no weight)
    store.put_many({routing.key("gw-a"): None})
    agent.step(0)
    st = _status(store)["routing"]
    assert st["canary"] == "on" and "10.0.0.100/32" in st["announced"]
    assert st["state_revision"] is None


def test_a_restarted_agent_starts_from_the_stored_weight(world) -> None:
    store, log, clock = world
    store.put(routing.key("gw-a"), GatewayRouting(revision=3, bandwidth_mbps=500).to_bytes())
    agent, _owner, applier = _agent(store, log, clock)
    agent.step(0)
    # the very first configuration already carries the weight: the file a restarted bgpd
    # reads never goes back to plain ECMP
    assert len(applier.configs) == 1
    assert "set extcommunity bandwidth 500" in applier.configs[0]
    assert _status(store)["routing"]["state_revision"] == 3


def test_a_broken_object_is_refused_and_the_last_state_stays(world) -> None:
    store, log, clock = world
    agent, _owner, applier = _agent(store, log, clock)
    store.put(routing.key("gw-a"), GatewayRouting(revision=4, bandwidth_mbps=700).to_bytes())
    agent.step(0)
    n = len(applier.configs)
    store.put(routing.key("gw-a"), b'{"revision": 5, "bandwidth_mbps": 99999}')
    agent.step(0)
    st = _status(store)["routing"]
    assert st["state_revision"] == 4 and st["bandwidth_mbps"] == 700
    assert "bandwidth_mbps" in st["state_error"]
    assert len(applier.configs) == n  # nothing applied
    store.put(routing.key("gw-a"), GatewayRouting(revision=6, bandwidth_mbps=900).to_bytes())
    agent.step(0)
    st = _status(store)["routing"]
    assert st["state_revision"] == 6 and st["state_error"] == ""


def test_a_state_frr_refuses_is_reported_as_an_error_with_its_revision_pending(world) -> None:
    store, log, clock = world
    agent, _owner, applier = _agent(store, log, clock)
    agent.step(0)
    applier.fail = "bgpd: no"
    store.put(routing.key("gw-a"), GatewayRouting(revision=2, bandwidth_mbps=100).to_bytes())
    agent.step(0)
    st = _status(store)["routing"]
    assert st["mode"] == "error" and st["state_revision"] is None and st["state_wanted"] == 2
    applier.fail = None
    clock.t += 10  # past the retry delay
    agent.step(0)
    assert _status(store)["routing"]["state_revision"] == 2
