"""The emulation's crosszone gateways are programmed by a controller and one agent each.

An intent change sent to the controller's API reaches every gateway's kernel maps through its
agent; `emulate status --json` names the controller and the agents; each agent serves metrics.
"""

from __future__ import annotations

import copy
import json
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from emulate_helpers import sh

from crosszone.control.client import Client
from crosszone.emulate import control_plane, deploy
from crosszone.emulate.control_plane import crosszone_bin
from crosszone.fastpath.deploy import pinned_maps

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


def test_intent_change_reaches_every_gateway(deployment: deploy.Deployment) -> None:
    """Add a host through the controller: each agent applies the new revision to its maps."""
    gws = control_plane.gateways(deployment.plan)
    before = {g.name: _host_entries(g.pin_dir) for g in gws}
    doc = copy.deepcopy(control_plane.cluster_intent(deployment.plan))
    extra = dict(doc["hosts"][0], name="extra-host", addresses=["10.199.0.10"],
                 mac="02:ee:00:00:00:01")
    # An address inside the first VPC's prefix (a /16 or shorter), away from the endpoints.
    vpc = next(v for v in deployment.plan.spec.vpcs if f"vpc-{v.name}" == extra["vpc"])
    extra["addresses"] = [str(vpc.prefix.network_address + 250 * 256 + 10)]
    doc["hosts"].append(extra)
    client = Client(control_plane.controller_url(), control_plane.token())
    try:
        client.apply(yaml.safe_dump(doc, sort_keys=False))
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
