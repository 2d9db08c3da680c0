"""The migration's routing object through a real agent and a real FRR (issue 23, deliverable 2).

The same two namespaces as test_agent_routing (a gateway with a per-namespace FRR, a router):
the migration's runner writes the gateway's routing object (`routing/<gateway>`) into the
store; the agent applies it at its next step and reports its revision; the router sees the
link bandwidth. Then the gateway's bgpd is killed and started again from its configuration file
alone (no agent step in between): the router learns the routes again with the same weight,
because the weight lives in the store and in the file the agent rendered, not only in bgpd's
running configuration. A graceful-shutdown object then reaches the router as the GRACEFUL_SHUTDOWN
community. Namespaces `czt23-<pid>-*`; everything goes in `finally` (the lab fixture).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from frr_netns import FRR_BIN, ns_sh
from test_agent_routing import (  # noqa: F401  (lab: the fixture)
    ROUTER_CONF,
    VPC_A,
    Lab,
    _intent,
    _json,
    _learnt,
    _session,
    _wait,
    lab,
)

from crosszone.agent.agent import Agent
from crosszone.agent.frr_apply import FrrReloadApplier, FrrTarget
from crosszone.agent.routing_owner import RoutingOwner
from crosszone.compile.diff import DictSink
from crosszone.store import routing
from crosszone.store.routing import GatewayRouting
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT, STATUS


def _paths(lb: Lab) -> list[dict[str, Any]]:
    route = _json(lb.rt, "show bgp ipv4 unicast 100.64.0.0/16 json")
    return [p for p in route.get("paths", []) if isinstance(p, dict)]


def _carries(lb: Lab, text: str) -> bool:
    """Whether the router's path to 100.64.0.0/16 carries `text` in its communities."""
    return any(text in json.dumps(p.get("extendedCommunity", {})) + json.dumps(
        p.get("community", {})) for p in _paths(lb))


def _restart_bgpd(lb: Lab) -> None:
    """Kill the gateway's bgpd and start it again from its configuration file."""
    pid = lb.gw.pids()["bgpd"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while "bgpd" in lb.gw.pids():
        if time.monotonic() > deadline:
            raise AssertionError("bgpd did not die")
        time.sleep(0.05)
    (lb.gw.dir / "bgpd.vty").unlink(missing_ok=True)
    d = lb.gw.dir
    ns_sh(lb.gw_ns, str(FRR_BIN / "bgpd"), "-d", "-N", lb.gw_ns, "-f", str(d / "frr.conf"),
          "-i", str(d / "bgpd.pid"), "-z", str(d / "zserv.api"), "--vty_socket", str(d),
          "-P", "0")
    _wait("bgpd back", lambda: (d / "bgpd.vty").exists())


def test_the_routing_object_is_applied_reported_and_survives_a_bgpd_restart(
        lab: Lab, tmp_path: Path) -> None:  # noqa: F811  (the fixture)
    router = FrrReloadApplier(FrrTarget(pathspace=lab.rt_ns,
                                        config_file=lab.rt.dir / "frr.conf",
                                        rundir=lab.base / "run"))
    router.apply(ROUTER_CONF)
    target = FrrTarget(vty_socket=lab.gw.dir, config_file=lab.gw.dir / "frr.conf",
                       rundir=lab.base / "run")
    owner = RoutingOwner("gw-t", FrrReloadApplier(target), hostname=socket.gethostname(),
                         check_every=3600)
    store = SqliteStore(str(tmp_path / "s.db"))
    try:
        agent = Agent("gw-t", store, DictSink(), lambda name: 5, routing=owner)
        store.put_many({INTENT + k: v for k, v in _intent(VPC_A).items()})
        agent.step(0)
        assert owner.mode == "managed", owner.message
        _wait("the session", lambda: _session(lab).get("bgpState") == "Established")
        _wait("the router to learn the VPC", lambda: "100.64.0.0/16" in _learnt(lab))

        # the runner's object for this gateway: a weight
        store.put(routing.key("gw-t"), GatewayRouting(revision=5, bandwidth_mbps=400,
                                                      by="migration").to_bytes())
        agent.step(0)
        st = json.loads(store.get(STATUS + "gw-t") or b"{}")["routing"]
        assert (st["state_revision"], st["bandwidth_mbps"], st["mode"]) == (5, 400, "managed")
        assert "set extcommunity bandwidth 400" in (lab.gw.dir / "frr.conf").read_text()
        _wait("the weight at the router", lambda: _carries(lab, "400"))

        # bgpd killed and started from its file: the weight comes back with the routes
        _restart_bgpd(lab)
        _wait("the session again", lambda: _session(lab).get("bgpState") == "Established",
              timeout=60)
        _wait("the routes again, weighted", lambda: "100.64.0.0/16" in _learnt(lab)
              and _carries(lab, "400"), timeout=60)
        assert "set extcommunity bandwidth 400" in lab.gw.vtysh("show running-config bgpd")

        # drained: the graceful-shutdown community reaches the router
        store.put(routing.key("gw-t"), GatewayRouting(revision=6, graceful_shutdown=True)
                  .to_bytes())
        agent.step(0)
        assert json.loads(store.get(STATUS + "gw-t") or b"{}")["routing"][
            "state_revision"] == 6
        _wait("graceful shutdown at the router", lambda: _carries(lab, "gracefulShutdown")
              or _carries(lab, "65535:0"))
        assert owner.errors == 0
    finally:
        store.close()
