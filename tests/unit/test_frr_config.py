"""The agent's FRR rendering (agent/frr_config.py) against golden files, the emulator's gateway
configuration it replaces, and what it refuses (no root, no FRR).

CZ_UPDATE_GOLDEN=1 rewrites the golden files (read the diff before committing it).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from crosszone.agent.frr_config import (
    RenderError,
    RoutingState,
    render,
)
from crosszone.intent.cluster import load_cluster, parse_cluster, to_document
from crosszone.intent.schema import Cluster
from crosszone_lab.emulate import control_plane, frr, topology
from crosszone_lab.emulate.topology import COMPUTE_ROUTER_AS, GATEWAY_AS, STORAGE_ROUTER_AS

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "frr"
HOST = "gw-host"  # the machine's hostname in the goldens (the agent passes the real one)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("CZ_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden file {path} (set CZ_UPDATE_GOLDEN=1)"
    assert text == path.read_text(), f"{name} differs from its golden file"


def _example_gateways() -> list[tuple[str, str]]:
    """(example file, gateway) for every example intent's gateway that has `bgp:`."""
    out = []
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if not isinstance(doc, dict) or doc.get("version") != 2 or "gateways" not in doc:
            continue
        cluster = load_cluster(path)
        out += [(path.name, gw.name) for gw in cluster.gateways if gw.bgp is not None]
    return out


EXAMPLES = _example_gateways()


def test_some_example_has_a_bgp_gateway() -> None:
    assert EXAMPLES, "no example intent has a gateway with bgp: (nothing to render)"


@pytest.mark.parametrize(("example", "gateway"), EXAMPLES)
def test_every_example_gateway_with_bgp_renders_its_golden(example: str, gateway: str) -> None:
    cluster = load_cluster(ROOT / "examples" / example)
    out = render(cluster, gateway, hostname=HOST)
    assert out is not None
    _golden(f"{Path(example).stem}-{gateway}.conf", out.config)


def _emulated() -> tuple[topology.Plan, Cluster]:
    """The emulator's cluster intent for examples/emulate-small.yaml: each crosszone gateway's
    `bgp:` is what its agent renders the gateway's FRR configuration from."""
    plan = topology.plan(topology.load(ROOT / "examples" / "emulate-small.yaml"))
    doc = control_plane.cluster_intent(plan)
    by_name = {gw.name: gw for gw in plan.gateways}
    for g in doc["gateways"]:
        gw = by_name[g["name"]]
        assert g["bgp"] == {"asn": GATEWAY_AS, "router_id": gw.router_id,
                            "peers": [{"address": gw.compute_peer, "asn": COMPUTE_ROUTER_AS,
                                       "role": "compute"},
                                      {"address": gw.storage_peer, "asn": STORAGE_ROUTER_AS,
                                       "role": "storage"}],
                            "bfd": {"interval_ms": plan.spec.bfd.interval_ms,
                                    "multiplier": plan.spec.bfd.multiplier}}
    return plan, parse_cluster(yaml.safe_dump(doc))


def test_emulated_gateway_renders_its_golden() -> None:
    plan, cluster = _emulated()
    gw = next(g for g in plan.gateways if g.kind == "crosszone")
    out = render(cluster, gw.name, hostname=HOST)
    assert out is not None
    _golden("emulate-small-crosszone.conf", out.config)


def _facts(config: str) -> dict[str, object]:
    """What two gateway configurations must agree on to behave the same: networks per family,
    anchors, neighbours with their AS and connect timer, the BFD timers, and what each
    neighbour's outbound route-map lets through."""
    lines = config.splitlines()
    fam, nets = "", {"ipv4": set(), "ipv6": set()}
    rmap: dict[str, str] = {}
    for line in lines:
        if m := re.match(r" address-family (ipv4|ipv6) unicast", line):
            fam = m.group(1)
        elif m := re.match(r"  network (\S+)", line):
            nets[fam].add(m.group(1))
        elif m := re.match(r"  neighbor (\S+) route-map (\S+) out", line):
            rmap[m.group(1) + "/" + fam] = m.group(2)
    lists: dict[str, set[str]] = {}
    for line in lines:
        if m := re.match(r"ip(?:v6)? prefix-list (\S+) seq \d+ permit (\S+)", line):
            lists.setdefault(m.group(1), set()).add(m.group(2))
    maps: dict[str, set[str]] = {}
    current = ""
    for line in lines:
        if m := re.match(r"route-map (\S+) permit", line):
            current = m.group(1)
        elif m := re.match(r" match ip(?:v6)? address prefix-list (\S+)", line):
            maps.setdefault(current, set()).update(lists[m.group(1)])
    return {
        "networks": nets,
        "anchors": {x for x in lines if re.match(r"ip(?:v6)? route ", x)},
        "neighbors": sorted(x.strip() for x in lines
                            if re.match(r" neighbor \S+ (remote-as|timers connect)", x)),
        "bfd": sorted(x.strip() for x in lines if re.match(r"  (detect-multiplier|"
                                                           r"receive-interval|"
                                                           r"transmit-interval) ", x)),
        "sends": {k: maps[v] for k, v in rmap.items()},
    }


def test_emulated_gateway_is_equivalent_to_the_emulators_own_configuration() -> None:
    """The agent's configuration of a crosszone gateway behaves as the emulator's of a legacy
    gateway (emulate/frr.py), so both kinds meet the routers alike."""
    plan, cluster = _emulated()
    for gw in (g for g in plan.gateways if g.kind == "crosszone"):
        ours = render(cluster, gw.name, hostname=HOST)
        assert ours is not None
        theirs = frr.gateway_config(plan, gw, active=True) + frr.bfd_config(gw.ns, plan.spec)
        assert _facts(ours.config) == _facts(theirs)
        # every peer has BFD with the intent's profile
        assert f" neighbor {gw.compute_peer} bfd profile crosszone" in ours.config


def test_states_render_their_goldens() -> None:
    cluster = load_cluster(ROOT / "examples" / "cluster.yaml")
    states = {
        "weighted": RoutingState(bandwidth_mbps=400),
        "drained": RoutingState(bandwidth_mbps=400, graceful_shutdown=True),
        "canary-only": RoutingState(canary="only", canary_vpcs=frozenset({"tenant-b"})),
        "canary-off": RoutingState(canary="off", canary_vpcs=frozenset({"tenant-b"})),
        "withdrawn": RoutingState(withdraw=True),
    }
    for name, state in states.items():
        out = render(cluster, "gw-a", state, hostname=HOST)
        assert out is not None and out.state == state
        _golden(f"cluster-gw-a-{name}.conf", out.config)


def test_what_each_state_announces() -> None:
    cluster = load_cluster(ROOT / "examples" / "cluster.yaml")
    b = frozenset({"tenant-b"})

    def announced(state: RoutingState) -> set[str]:
        out = render(cluster, "gw-a", state)
        assert out is not None
        return set(out.announced)

    full = {"10.0.0.100/32", "100.64.0.0/16", "100.65.0.0/16", "fd64:a::/64", "fd64:a::/65",
            "fd64:a:0:0:8000::/65"}
    assert announced(RoutingState()) == full
    assert announced(RoutingState(withdraw=True)) == set()
    assert announced(RoutingState(canary="only", canary_vpcs=b)) == {"100.65.0.0/16"}
    assert announced(RoutingState(canary="off", canary_vpcs=b)) == full - {"100.65.0.0/16"}
    weighted = render(cluster, "gw-a", RoutingState(bandwidth_mbps=400, graceful_shutdown=True))
    assert weighted is not None
    assert weighted.config.count("set extcommunity bandwidth 400") == 3  # every route-map entry
    assert " bgp graceful-shutdown" in weighted.config


def test_only_programmed_vpcs_are_announced_but_all_are_listed() -> None:
    cluster = load_cluster(ROOT / "examples" / "cluster.yaml")
    out = render(cluster, "gw-a", programmed={"tenant-b"})
    assert out is not None
    assert set(out.announced) == {"10.0.0.100/32", "100.65.0.0/16"}
    assert "  network 100.64.0.0/16" not in out.config
    assert "permit 100.64.0.0/16" in out.config  # prefix-list stays: a later announce adds
    assert "ip route 100.64.0.0/16 compute0" in out.config  # one `network` line only


def test_adding_a_vpc_changes_only_its_own_lines() -> None:
    cluster = load_cluster(ROOT / "examples" / "cluster.yaml")
    doc = to_document(cluster)
    doc["vpcs"].append({"name": "tenant-c", "vni": 1003, "prefixes": ["10.50.0.0/16"],
                        "storage_facing": ["100.66.0.0/16"],
                        "router_mac": "02:00:00:00:cc:01"})
    bigger = parse_cluster(yaml.safe_dump(doc))
    old, new = render(cluster, "gw-a"), render(bigger, "gw-a")
    assert old is not None and new is not None
    gone = set(old.config.splitlines()) - set(new.config.splitlines())
    added = set(new.config.splitlines()) - set(old.config.splitlines())
    assert gone == set()
    assert added and all("100.66.0.0/16" in line for line in added)


def test_rendering_is_deterministic() -> None:
    cluster = load_cluster(ROOT / "examples" / "cluster.yaml")
    a, b = render(cluster, "gw-b"), render(cluster, "gw-b")
    assert a == b


def test_a_gateway_without_bgp_renders_nothing() -> None:
    doc = to_document(load_cluster(ROOT / "examples" / "cluster.yaml"))
    del doc["gateways"][0]["bgp"]
    assert render(parse_cluster(yaml.safe_dump(doc)), "gw-a") is None


def test_bfd_off_and_timers() -> None:
    doc = to_document(load_cluster(ROOT / "examples" / "cluster.yaml"))
    doc["gateways"][0]["bgp"]["bfd"] = False
    doc["gateways"][1]["bgp"]["bfd"] = {"interval_ms": 30, "multiplier": 3}
    cluster = parse_cluster(yaml.safe_dump(doc))
    off, timed = render(cluster, "gw-a"), render(cluster, "gw-b")
    assert off is not None and timed is not None
    assert "bfd" not in off.config
    assert "  detect-multiplier 3\n  receive-interval 30\n  transmit-interval 30" in timed.config


@pytest.mark.parametrize(("state", "message"), [
    (RoutingState(bandwidth_mbps=0), "outside 1..25600"),
    (RoutingState(bandwidth_mbps=25601), "outside 1..25600"),
    (RoutingState(canary="only"), "at least one canary VPC"),
    (RoutingState(canary="off", canary_vpcs=frozenset({"nope"})), "nope is not in the intent"),
])
def test_states_that_cannot_render_are_refused(state: RoutingState, message: str) -> None:
    cluster = load_cluster(ROOT / "examples" / "cluster.yaml")
    with pytest.raises(RenderError, match=message):
        render(cluster, "gw-a", state)


def test_an_unknown_gateway_is_a_key_error() -> None:
    with pytest.raises(KeyError):
        render(load_cluster(ROOT / "examples" / "cluster.yaml"), "gw-zz")


@pytest.mark.parametrize("bgp", [
    {"asn": 65100, "router_id": "10.0.0.1", "bfd": {"interval_ms": 5}},
    {"asn": 65100, "router_id": "10.0.0.1", "bfd": {"multiplier": 1}},
    {"asn": 65100, "router_id": "10.0.0.1", "bfd": {"interval": 100}},
    {"asn": 65100, "router_id": "10.0.0.1", "bfd": "yes"},
    {"asn": 65100, "router_id": "10.0.0.1", "peers": [{"address": "10.9.0.1", "asn": 1,
                                                       "role": "both"}]},
    {"asn": 0, "router_id": "10.0.0.1"},
    {"asn": 65100, "router_id": "fd00::1"},
])
def test_the_schema_refuses_bad_bgp_sections(bgp: dict) -> None:
    doc = to_document(load_cluster(ROOT / "examples" / "cluster.yaml"))
    doc["gateways"][0]["bgp"] = bgp
    with pytest.raises((ValidationError, ValueError)):
        parse_cluster(yaml.safe_dump(doc))
