"""A VPC taken out of the crosszone gateways' intent and put back under traffic (issue 23).

The emulated migration topology with both gateway sets carrying traffic (`switch both`): the
legacy gateways keep serving VPC b throughout. A sequence-numbered UDP probe runs between a VPC
b endpoint and a storage node, both families, both directions. VPC b is removed from the
crosszone gateways' intent, then added back. Each crosszone agent withdraws VPC b's
storage-facing prefixes before it removes its maps, and announces them only after it has
programmed them, so the storage router never sends a reply to a crosszone gateway that cannot
translate it: the probe's to-compute streams (storage node -> endpoint, routed by those
prefixes) lose nothing.

The to-storage streams are not held to that: every VPC's requests go to one anycast VTEP, which
the crosszone gateways keep announcing for the other VPCs, so the compute router keeps sending
VPC b's requests to them while they do not serve it (docs/routing.md, "Make-before-break with
the maps"). They are reported, not asserted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from crosszone.control.client import Client
from crosszone_lab.bench.failover import start_probe
from crosszone_lab.emulate import control_plane, deploy
from crosszone_lab.emulate.migration import intent_vpc_name
from crosszone_lab.workload.udp_probe import analyse

pytestmark = pytest.mark.integration

PPS, FLOWS = 2000, 16


@pytest.fixture(scope="module")
def dep(migrate_deployment: deploy.Deployment) -> deploy.Deployment:
    return migrate_deployment


def _apply(client: Client, intent: dict[str, Any]) -> int:
    client.apply(yaml.safe_dump(intent, sort_keys=False))
    return int(client.intent()["revision"])


def _announced(dep: deploy.Deployment, prefix: str) -> dict[str, bool]:
    """Whether each crosszone gateway's agent reports `prefix` announced."""
    out = {}
    for gw in control_plane.gateways(dep.plan):
        routing = control_plane.agent_status(gw).get("routing") or {}
        out[gw.name] = prefix in (routing.get("announced") or [])
    return out


def _wait_announced(dep: deploy.Deployment, prefix: str, want: bool, revision: int) -> None:
    for gw in control_plane.gateways(dep.plan):
        control_plane.wait_applied(gw, revision)
    deadline = time.time() + 60
    while set(_announced(dep, prefix).values()) != {want}:
        assert time.time() < deadline, (prefix, want, _announced(dep, prefix))
        time.sleep(0.1)


def test_a_vpc_removed_and_added_back_loses_no_reply(dep: deploy.Deployment,
                                                      tmp_path: Path) -> None:
    p = dep.plan
    vpc = p.spec.vpcs[1]
    name = intent_vpc_name(vpc.name)
    facing = str(vpc.storage_facing)
    full = control_plane.cluster_intent(p)
    without = {**full, "vpcs": [v for v in full["vpcs"] if v["name"] != name],
               "hosts": [h for h in full["hosts"] if h["vpc"] != name]}
    assert len(without["vpcs"]) == len(full["vpcs"]) - 1
    ep = next(e for e in p.endpoints if e.vpc.name == vpc.name)
    client = Client(control_plane.controller_url(), control_plane.token())
    dep.switch("both", log=lambda _m: None)
    try:
        _wait_announced(dep, facing, True, int(client.intent()["revision"]))
        probe = start_probe(p, ep, p.storage_nodes[0], PPS, FLOWS, tmp_path, max_s=120,
                            dscp=p.spec.priority_dscp)
        try:
            time.sleep(2)
            _wait_announced(dep, facing, False, _apply(client, without))
            time.sleep(2)
            _wait_announced(dep, facing, True, _apply(client, full))
            time.sleep(2)
        finally:
            records = probe.stop()
    finally:
        _apply(client, full)  # whatever happened, the intent is whole again
        client.close()
        dep.switch(p.spec.active, log=lambda _m: None)
    lost = {stream: analyse(s, r, int(1e9 / PPS), FLOWS) for stream, (s, r) in records.items()}
    print({k: (a.sent, a.lost) for k, a in lost.items()})  # the to-storage figures, reported
    replies = {k: a for k, a in lost.items() if k.startswith("to_compute")}
    assert replies and all(a.sent > 5000 for a in replies.values()), lost
    assert all(a.lost == 0 for a in replies.values()), {k: a.lost for k, a in replies.items()}
