"""What the migration asks of FRR, without FRR: link-bandwidth values, the routers' inbound
policy per step, the bgpd command blocks,
kernel weights from `ip -j -d route`, the target's share, and when a router has converged."""

from __future__ import annotations

import json

from crosszone.emulate import frr, frr_weights
from crosszone.emulate.fib_watch import share
from crosszone.emulate.migration import _matches


def test_link_bandwidth_splits_the_percentage_over_a_kind() -> None:
    lb = frr_weights.link_bandwidth
    assert lb(10, 2) == 1000 and lb(90, 2) == 9000
    assert lb(100, 1) == 20000
    assert lb(1, 8) == 25  # still an integer >= 1 per gateway
    assert lb(0.001, 8) == 1 and lb(100, 0) <= 25600


def test_step_policy_weighs_both_kinds_and_keeps_the_idle_kind_as_backup() -> None:
    src, dst = ["lgw1", "lgw2"], ["xgw1", "xgw2"]
    p10 = frr_weights.step_policy(src, dst, 10)
    assert p10 == {"lgw1": (9000, False), "lgw2": (9000, False),
                   "xgw1": (1000, False), "xgw2": (1000, False)}
    assert frr_weights.step_policy(src, dst, 0) == {
        "lgw1": (None, False), "lgw2": (None, False), "xgw1": (None, True), "xgw2": (None, True)}
    assert frr_weights.step_policy(src, dst, 100) == {
        "lgw1": (None, True), "lgw2": (None, True), "xgw1": (None, False), "xgw2": (None, False)}
    assert frr_weights.plain_policy(src) == {"lgw1": (None, False), "lgw2": (None, False)}


def test_policy_commands_rewrite_each_gateway_route_map_then_rerun_stored_routes() -> None:
    cmds = frr_weights.policy_commands({"xgw1": (1000, False), "lgw1": (None, True)}, v6=True)
    assert cmds[0] == "configure terminal"
    i, j = cmds.index("route-map FROM-LGW1 permit 10"), cmds.index("route-map FROM-XGW1 permit 10")
    assert cmds[i + 1:i + 3] == ["no set extcommunity bandwidth",
                                 f"set local-preference {frr_weights.BACKUP_LOCAL_PREF}"]
    assert cmds[j + 1:j + 3] == ["set extcommunity bandwidth 1000", "no set local-preference"]
    assert cmds[-2:] == ["clear bgp ipv4 unicast * soft in", "clear bgp ipv6 unicast * soft in"]
    assert not any("ipv6" in c for c in frr_weights.policy_commands({"a": (1, False)}, False))
    # the router config those commands edit: the route-maps exist and are applied inbound
    af4, af6, maps = frr_weights.inbound_config({"xgw1": "10.10.3.2"}, v6=False)
    assert af4 == ["  neighbor 10.10.3.2 soft-reconfiguration inbound",
                   "  neighbor 10.10.3.2 route-map FROM-XGW1 in"] and af6 == []
    assert maps[0] == "route-map FROM-XGW1 permit 10"


def test_drain_commands_toggle_graceful_shutdown() -> None:
    assert "bgp graceful-shutdown" in frr_weights.drain_commands(65100, True)
    assert "no bgp graceful-shutdown" in frr_weights.drain_commands(65100, False)
    assert "router bgp 65100" in frr_weights.drain_commands(65100, False)


def test_bgp_path_peers_lists_every_path_used_or_not() -> None:
    doc = {"prefix": "10.0.0.100/32", "paths": [
        {"peer": {"peerId": "10.10.2.2"}, "bestpath": {"overall": True}},
        {"peer": {"peerId": "10.10.3.2"}}, {"nexthops": []}, "junk"]}
    assert frr.bgp_path_peers(json.dumps(doc)) == {"10.10.2.2", "10.10.3.2"}
    assert frr.bgp_path_peers("") == set() and frr.bgp_path_peers("not json") == set()
    assert frr.bgp_path_peers("[]") == set() and frr.bgp_path_peers("{}") == set()


def test_prefix_commands_order_make_before_break() -> None:
    on = frr.prefix_commands(["10.0.0.100/32"], ["100.64.0.0/16", "fd64:a::/64"], False)
    assert on.index("network 100.64.0.0/16") < on.index("network 10.0.0.100/32")
    assert "network fd64:a::/64" in on and on[-1] == "end"
    off = frr.prefix_commands(["10.0.0.100/32"], ["100.64.0.0/16"], True)
    assert off.index("no network 10.0.0.100/32") < off.index("no network 100.64.0.0/16")


def test_kernel_weights_and_share() -> None:
    route = [{"type": "unicast", "dst": "10.0.0.100", "nexthops": [
        {"gateway": "10.10.3.2", "dev": "g3", "weight": 5, "flags": []},
        {"gateway": "10.10.4.2", "dev": "g4", "weight": 5, "flags": []},
        {"gateway": "10.10.1.2", "dev": "g1", "weight": 45, "flags": []},
        {"gateway": "10.10.2.2", "dev": "g2", "weight": 45, "flags": ["linkdown"]}]}]
    w = frr.kernel_weights(json.dumps(route))
    assert w == {"g3": 5, "g4": 5, "g1": 45}
    assert frr.kernel_nexthops(json.dumps(route)) == {"g1", "g3", "g4"}
    assert round(share(w, {"g3", "g4"}), 1) == 18.2
    single = [{"type": "unicast", "dst": "10.0.0.100", "gateway": "10.10.1.2", "dev": "g1"}]
    assert frr.kernel_weights(json.dumps(single)) == {"g1": 1}
    assert frr.kernel_weights("not json") == {} and share({}, {"g1"}) == 0.0


def test_converged_means_the_devices_and_the_share_of_the_step() -> None:
    new = {"g3", "g4"}
    step10 = {"g1": 45, "g2": 45, "g3": 5, "g4": 5}
    step1 = {"g1": 49, "g2": 49, "g3": 1, "g4": 1}
    assert _matches(step10, {"g1", "g2", "g3", "g4"}, 10.0, new, False)
    assert not _matches(step1, {"g1", "g2", "g3", "g4"}, 10.0, new, False)  # the old step
    assert not _matches({"g1": 50, "g2": 50}, {"g1", "g2", "g3", "g4"}, 10.0, new, False)
    assert _matches({"g3": 1, "g4": 1}, new, None, new, False)
    assert not _matches({"g3": 1, "g4": 1, "g1": 1}, new, None, new, False)
    assert _matches({"g3": 1, "g4": 1, "g1": 1}, new, None, new, True)  # announced, at least
