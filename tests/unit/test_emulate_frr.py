"""Generated FRR and nftables configuration of the emulator, against golden files (no root).

Regenerate after an intended change: CZ_UPDATE_GOLDEN=1 pytest tests/unit/test_emulate_frr.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from crosszone.linux import netns
from crosszone_lab.emulate import control_plane, deploy, frr, kinds, legacy_gateway, topology
from crosszone_lab.emulate import crosszone_gateway as xgw

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "golden" / "emulate"


@pytest.fixture(scope="module")
def plan() -> topology.Plan:
    return topology.plan(topology.load(ROOT / "examples" / "emulate-small.yaml"))


def _golden(name: str, text: str) -> None:
    # Golden files name the default instance; a second instance (CROSSZONE_EMULATE_INSTANCE)
    # differs only in its prefix and run directory.
    text = text.replace(str(topology.RUN_DIR) + "/", "/run/crosszone-emulate/").replace(
        topology.PREFIX, "czemu-")
    path = GOLDEN / name
    if os.environ.get("CZ_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path} (set CZ_UPDATE_GOLDEN=1)"
    assert text == path.read_text(), f"{name} differs from its golden file"


def test_compute_router_config(plan: topology.Plan) -> None:
    # as `up` starts it: the crosszone gateways on standby until their fast path is attached
    _golden("compute-router.conf",
            frr.router_config(plan, "compute", plan.gateways_of("crosszone")))


def test_storage_router_config(plan: topology.Plan) -> None:
    _golden("storage-router.conf",
            frr.router_config(plan, "storage", plan.gateways_of("crosszone")))


def test_routers_take_or_refuse_an_agents_gateway(plan: topology.Plan) -> None:
    """A crosszone gateway's announcements are its agent's: the switch takes it in and out on
    the routers' side (storage router first in, compute router first out), both families."""
    gw = plan.gateways_of("crosszone")[0]
    take, refuse = deploy.take_in_ops(plan, gw), deploy.take_out_ops(plan, gw)
    assert take == frr.router_accept_ops(plan, gw, True)
    assert refuse == frr.router_accept_ops(plan, gw, False)

    def lines(op: netns.Op) -> list[str]:
        assert isinstance(op, netns.Cmd)
        return [op.argv[i + 1] for i, a in enumerate(op.argv) if a == "-c"]

    sr, cr = (str(frr.frr_dir(ns)) for ns in (plan.storage_router_ns, plan.compute_router_ns))
    assert [op.argv[2] for op in take] == [sr, cr]  # type: ignore[attr-defined]
    assert [op.argv[2] for op in refuse] == [cr, sr]  # type: ignore[attr-defined]
    storage_in = lines(take[0])
    assert storage_in.count(f"no neighbor {gw.storage_addr} route-map {frr.STANDBY_MAP} in") == 2
    assert "address-family ipv6 unicast" in storage_in
    assert lines(refuse[0]) == [
        "configure terminal", f"router bgp {topology.COMPUTE_ROUTER_AS}",
        "address-family ipv4 unicast", f"neighbor {gw.compute_addr} route-map "
        f"{frr.STANDBY_MAP} in", "exit-address-family", "end"]
    assert not take[0].check and refuse[0].check  # type: ignore[attr-defined]
    # nothing of it reaches the gateway itself; a legacy gateway announces by itself
    assert all(gw.ns not in " ".join(op.argv) for op in take + refuse)  # type: ignore[attr-defined]
    lgw = plan.gateways_of("legacy")[0]
    assert deploy.take_in_ops(plan, lgw) == frr.announce_ops(plan, lgw)
    assert deploy.take_out_ops(plan, lgw) == frr.withdraw_ops(plan, lgw)


def test_gateway_config_active_and_standby(plan: topology.Plan) -> None:
    gw = plan.gateways[0]
    _golden("gateway-active.conf", frr.gateway_config(plan, gw, active=True))
    _golden("gateway-standby.conf", frr.gateway_config(plan, gw, active=False))


def test_bfd_config(plan: topology.Plan) -> None:
    _golden("bfdd.conf", frr.bfd_config(plan.compute_router_ns, plan.spec))


def test_legacy_nftables(plan: topology.Plan) -> None:
    _golden("legacy.nft", legacy_gateway.nft_ruleset(plan))


def test_bgp_block_has_no_bfd_node(plan: topology.Plan) -> None:
    """bgpd must never see the `bfd` node: its `exit` would end configuration mode early."""
    for text in (frr.router_config(plan, "compute"),
                 frr.gateway_config(plan, plan.gateways[0], True)):
        assert "\nbfd\n" not in text


def test_announce_then_withdraw_order(plan: topology.Plan) -> None:
    gw = plan.gateways[0]
    ann = frr.announce_ops(plan, gw)[0].argv
    wd = frr.withdraw_ops(plan, gw)[0]
    assert ann.index("network 100.64.0.0/16") < ann.index("network 10.0.0.100/32")
    assert wd.argv.index("no network 10.0.0.100/32") < wd.argv.index("no network 100.64.0.0/16")
    assert not wd.check  # withdrawing twice is not an error


def test_route_nexthops_and_sessions_parsing() -> None:
    route = ('{"10.0.0.100/32": [{"selected": true, "nexthops": [{"ip": "10.10.1.2", '
             '"active": true}, {"ip": "10.10.2.2", "active": true}, {"ip": "10.10.3.2"}]}]}')
    assert frr.route_nexthops(route, "10.0.0.100/32") == {"10.10.1.2", "10.10.2.2"}
    assert frr.route_nexthops("not json", "x") == set()
    summ = ('{"ipv4Unicast": {"peers": {"10.10.1.2": {"state": "Established"}, '
            '"10.10.2.2": {"state": "Active"}}}}')
    assert frr.established_peers(summ) == {"10.10.1.2"}


def test_intent_matches_the_plan(plan: topology.Plan) -> None:
    gws = plan.gateways_of("crosszone")
    doc = control_plane.cluster_intent(plan)
    assert [g["name"] for g in doc["gateways"]] == [g.name for g in gws]
    for gw, g in zip(gws, doc["gateways"], strict=True):
        assert g["vtep"] == "10.0.0.100"
        assert [i["name"] for i in g["interfaces"]] == ["c0", "s0"]
        assert g["interfaces"][0]["next_hop_mac"] == gw.compute_peer_mac
        assert doc["storage_pools"][0]["next_hops"][0]["mac"] == gw.storage_peer_mac
    assert len(doc["hosts"]) == len(plan.endpoints)
    # The single-gateway file `fastpath attach` takes is the same intent, narrowed.
    one = xgw.intent(plan, gws[0])
    assert [g["name"] for g in one["gateways"]] == [gws[0].name]
    assert {k: v for k, v in one.items() if k != "gateways"} == {
        k: v for k, v in doc.items() if k != "gateways"}
    assert {v["vni"] for v in doc["vpcs"]} == {1001, 1002}
    # each gateway's routing, for its agent to render: the routers as peers with their roles
    for gw, g in zip(gws, doc["gateways"], strict=True):
        assert g["bgp"] == {
            "asn": topology.GATEWAY_AS, "router_id": gw.router_id,
            "peers": [{"address": gw.compute_peer, "asn": topology.COMPUTE_ROUTER_AS,
                       "role": "compute"},
                      {"address": gw.storage_peer, "asn": topology.STORAGE_ROUTER_AS,
                       "role": "storage"}],
            "bfd": {"interval_ms": plan.spec.bfd.interval_ms,
                    "multiplier": plan.spec.bfd.multiplier}}


def test_build_ops_are_planned_not_run(plan: topology.Plan) -> None:
    ex = netns.RecordingExecutor()
    ex.apply(deploy.build_ops(plan, "legacy"))
    cmds = [str(op) for op in ex.ops if isinstance(op, netns.Cmd)]
    assert any("type vxlan id 1001" in c for c in cmds)
    assert all(topology.PREFIX in c or not c.startswith("ip netns exec") for c in cmds)
    # Legacy gateways announce by their own configuration. A crosszone gateway's FRR starts
    # empty (its agent renders and applies its configuration) and the routers keep it on
    # standby until its fast path is attached.
    confs = {str(op.path): op.text for op in ex.ops if isinstance(op, netns.WriteFile)}
    lgw = next(t for p, t in confs.items() if p.endswith(f"{topology.PREFIX}lgw1/frr.conf"))
    assert "network 10.0.0.100/32" in lgw
    for gw in plan.gateways_of("crosszone"):
        for name in ("frr.conf", "bfdd.conf"):
            text = confs[str(frr.frr_dir(gw.ns) / name)]
            assert text == frr.AGENT_START_CONFIG
            assert "router bgp" not in text and "hostname" not in text
        start = [op.argv for op in ex.ops if isinstance(op, netns.Cmd)
                 and op.argv[:4] == ("ip", "netns", "exec", gw.ns) and "-f" in op.argv]
        assert len(start) == len(frr.DAEMONS)
        assert all(f"file:{frr.frr_dir(gw.ns) / 'frr.log'}" in argv for argv in start)
    for ns in (plan.compute_router_ns, plan.storage_router_ns):
        router = confs[str(frr.frr_dir(ns) / "frr.conf")]
        refused = {line.split()[1] for line in router.splitlines()
                   if line.endswith(f"route-map {frr.STANDBY_MAP} in")}
        attr = "compute_addr" if ns == plan.compute_router_ns else "storage_addr"
        assert refused == {getattr(g, attr) for g in plan.gateways_of("crosszone")}


def test_cluster_intent_is_valid_and_compiles_for_every_gateway(plan: topology.Plan) -> None:
    """The emulation's intent passes the one checker, and each gateway compiles from it."""
    from crosszone.compile.tables import compile_tables
    from crosszone.intent.cluster import parse_cluster

    c = parse_cluster(yaml.safe_dump(control_plane.cluster_intent(plan)))
    for gw in plan.gateways_of("crosszone"):
        assert compile_tables(c, gw.name) is not None


def test_cluster_intent_refuses_a_topology_without_crosszone_gateways() -> None:
    spec = topology.load(ROOT / "examples" / "emulate-small.yaml")
    doc = spec.model_dump(mode="json") | {"gateways": {"legacy": 2, "crosszone": 0}}
    only_legacy = topology.plan(topology.TopologySpec.model_validate(doc))
    with pytest.raises(kinds.DeployError, match="no crosszone gateway"):
        control_plane.cluster_intent(only_legacy)
    assert control_plane.pidfiles(only_legacy) == []


def test_control_plane_ports_follow_the_instance(plan: topology.Plan) -> None:
    gws = plan.gateways_of("crosszone")
    ports = [control_plane.port_base()] + [
        int(control_plane.agent_metrics(g).rsplit(":", 1)[1]) for g in gws]
    assert len(set(ports)) == len(ports)
    assert all(1024 < p < 65536 for p in ports)


def test_careful_legacy_floats_static_routes_under_bgp(plan: topology.Plan) -> None:
    gw = plan.gateways_of("legacy")[0]
    (on,) = legacy_gateway.floating_route_ops(plan, gw, True)
    (off,) = legacy_gateway.floating_route_ops(plan, gw, False)
    lines = [on.argv[i + 1] for i, a in enumerate(on.argv) if a == "-c"]
    assert on.argv[:3] == ("vtysh", "--vty_socket", str(frr.frr_dir(gw.ns)))
    assert lines[0] == "configure terminal" and lines[-1] == "end"
    routes = lines[1:-1]
    d = legacy_gateway.FLOATING_DISTANCE
    assert routes == [f"ip route 10.1.{h.index}.0/24 {gw.compute_peer} {d}" for h in plan.hosts] + [
        f"ip route {plan.spec.storage.subnet} {gw.storage_peer} {d}",
        f"ipv6 route {plan.spec.storage.subnet6} {gw.storage_peer6} {d}"]
    undo = [off.argv[i + 1] for i, a in enumerate(off.argv) if a == "-c"][1:-1]
    assert undo == [f"no {r}" for r in routes] and not off.check


def test_each_daemon_starts_at_its_priority() -> None:
    argv = {d: frr.daemon_start_op("czemu-cr", d).argv for d in frr.DAEMONS}
    nice = ("nice", "-n", str(frr.ROUTING_NICE))
    assert frr.ROUTING_NICE < 0
    for d in ("bgpd", "zebra"):
        i = argv[d].index("nice")
        assert argv[d][i:i + 3] == nice and "chrt" not in argv[d]
    assert "chrt" in argv["bfdd"] and "nice" not in argv["bfdd"]
    assert argv["bfdd"][argv["bfdd"].index("chrt") + 2] == str(frr.BFDD_RT_PRIORITY)
    assert "nice" not in argv["staticd"] and "chrt" not in argv["staticd"]
    # the prefix comes before the daemon's binary, inside the namespace
    for d in frr.DAEMONS:
        assert argv[d][:4] == ("ip", "netns", "exec", "czemu-cr")
        assert argv[d].index(str(frr.FRR_BIN / d)) > 3
