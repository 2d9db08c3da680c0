"""The emulation's crosszone gateways are programmed by a controller and one agent each.

An intent change sent to the controller's API reaches every gateway's kernel maps through its
agent; `emulate status --json` names the controller and the agents; each agent serves metrics.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from emulate_helpers import busy_cpus, sh

from crosszone.control.client import Client
from crosszone.fastpath.deploy import pinned_maps
from crosszone.linux import pids as pids_mod
from crosszone_lab.bench import failover
from crosszone_lab.emulate import control_plane, deploy
from crosszone_lab.emulate import state as st
from crosszone_lab.emulate.control_plane import crosszone_bin
from crosszone_lab.workload.udp_probe import analyse

pytestmark = pytest.mark.integration


def _host_entries(pin_dir: Path) -> int:
    """Entries in the gateway's kernel host table, read back from its pinned map."""
    maps = pinned_maps(pin_dir)
    try:
        return maps.maps["hosts"].dump()[2]
    finally:
        maps.close()


def test_status_names_controller_and_agents(deployment: deploy.Deployment) -> None:
    out = json.loads(sh(crosszone_bin(), "emulate", "status", "--json"))
    gws = control_plane.gateways(deployment.plan)
    assert out["controller"]["running"] is True
    assert set(out["agents"]) == {g.name for g in gws}
    for name, agent in out["agents"].items():
        assert agent["running"] is True, name
        with urllib.request.urlopen(agent["metrics"], timeout=5) as r:
            text = r.read().decode()
        assert "crosszone_applied_revision" in text, name


def _with_extra_host(deployment: deploy.Deployment) -> str:
    """The emulation's intent with one more host (an address of the first VPC no endpoint uses)."""
    doc = copy.deepcopy(control_plane.cluster_intent(deployment.plan))
    extra = dict(doc["hosts"][0], name="extra-host", mac="02:ee:00:00:00:01")
    # An address inside the first VPC's prefix (a /16 or shorter), away from the endpoints.
    vpc = next(v for v in deployment.plan.spec.vpcs if f"vpc-{v.name}" == extra["vpc"])
    extra["addresses"] = [str(vpc.prefix.network_address + 250 * 256 + 10)]
    doc["hosts"].append(extra)
    return yaml.safe_dump(doc, sort_keys=False)


def test_intent_change_reaches_every_gateway(deployment: deploy.Deployment) -> None:
    """Add a host through the controller: each agent applies the new revision to its maps."""
    gws = control_plane.gateways(deployment.plan)
    before = {g.name: _host_entries(g.pin_dir) for g in gws}
    client = Client(control_plane.controller_url(), control_plane.token())
    try:
        client.apply(_with_extra_host(deployment))
        revision = int(client.intent()["revision"])
        for g in gws:
            control_plane.wait_applied(g, revision, timeout=30)
        reported = client.status()
        after = {g.name: _host_entries(g.pin_dir) for g in gws}
    finally:
        # Put the deployment's own intent back for the other tests.
        client.apply(yaml.safe_dump(control_plane.cluster_intent(deployment.plan),
                                    sort_keys=False))
        back = int(client.intent()["revision"])
        client.close()
    for g in gws:
        assert after[g.name] == before[g.name] + 1, (g.name, before, after)
    gateways = reported.get("gateways", reported)
    for g in gws:
        assert int(gateways[g.name]["revision"]) >= revision, reported
    deadline = time.monotonic() + 30
    while any(_host_entries(g.pin_dir) != before[g.name] for g in gws):
        assert time.monotonic() < deadline, "the restored intent did not reach the maps"
        time.sleep(0.2)
    for g in gws:
        control_plane.wait_applied(g, back, timeout=30)


def test_controller_refuses_without_token(deployment: deploy.Deployment) -> None:
    from crosszone.control.client import ControllerError

    client = Client(control_plane.controller_url(), "")
    try:
        with pytest.raises(ControllerError, match=r"401|403"):
            client.apply(yaml.safe_dump(control_plane.cluster_intent(deployment.plan)))
    finally:
        client.close()


def _kill(pidfile: Path) -> None:
    pid = int(pidfile.read_text().split()[0])
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pids_mod.pidfile_alive(pidfile):
        assert time.monotonic() < deadline, f"{pidfile} survived SIGKILL"
        time.sleep(0.05)


def test_controller_and_agents_down_and_back_forwarding_loses_nothing(
        deployment: deploy.Deployment, tmp_path: Path) -> None:
    """kill -9 of the controller and of every agent while the probe crosses the crosszone
    gateways (12,000 datagrams/s in all, 64 flows per direction and family, every CPU also
    busy): the fast path keeps
    forwarding on its own. Then both come back, the agents take over the pinned maps and apply
    two intent changes, still under the probe: nothing lost from the first kill to the end."""
    saved = st.load()
    active = saved.active if saved else deployment.plan.spec.active
    deployment.switch("crosszone", log=lambda _m: None)
    rate, flows = 3000.0, 64
    with busy_cpus():
        streams, t0, t1 = _kill_and_restart_under_probe(deployment, rate, flows, tmp_path)
    deployment.switch(active, log=lambda _m: None)
    per = {name: analyse(tx, rx, int(1e9 / rate), flows, t0, t1)
           for name, (tx, rx) in streams.items()}
    sent, lost = sum(a.sent for a in per.values()), sum(a.lost for a in per.values())
    print({n: a.to_json() for n, a in per.items()})
    assert sent > 4 * rate * 4, per  # four streams over more than four seconds
    assert lost == 0, {n: a.to_json() for n, a in per.items()}


def _kill_and_restart_under_probe(deployment: deploy.Deployment, rate: float, flows: int,
                                  tmp_path: Path) -> tuple[dict, int, int]:
    p = deployment.plan
    gws = control_plane.gateways(p)
    probe = failover.start_probe(p, p.endpoints[0], p.storage_nodes[0], rate, flows, tmp_path)
    try:
        time.sleep(1.0)
        t0 = time.time_ns()
        for f in [control_plane.controller_pidfile(), *map(control_plane.agent_pidfile, gws)]:
            _kill(f)
        time.sleep(3.0)  # forwarding with no control plane at all
        control_plane.start_controller(p)
        for g in gws:
            control_plane.start_agent(p, g)
        client = Client(control_plane.controller_url(), control_plane.token())
        try:
            for text in (_with_extra_host(deployment),
                         yaml.safe_dump(control_plane.cluster_intent(p), sort_keys=False)):
                client.apply(text)
                revision = int(client.intent()["revision"])
                for g in gws:  # a revision made after the restart: the new agents applied it
                    control_plane.wait_applied(g, revision, timeout=90)
        finally:
            client.close()
        time.sleep(0.5)
        t1 = time.time_ns()
        time.sleep(0.5)
    finally:
        streams = probe.stop()
    return streams, t0, t1
