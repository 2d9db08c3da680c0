"""What the migration asks of FRR, without FRR: link-bandwidth values, the bgpd command blocks,
kernel weights from `ip -j -d route`, the target's share, and when a router has converged."""

from __future__ import annotations

import json

from crosszone_lab.emulate import frr
from crosszone_lab.emulate.fib_watch import share
from crosszone_lab.emulate.migration import _matches


def test_link_bandwidth_splits_the_percentage_over_a_kind() -> None:
    assert frr.link_bandwidth(10, 2) == 1000 and frr.link_bandwidth(90, 2) == 9000
    assert frr.link_bandwidth(100, 1) == 20000
    assert frr.link_bandwidth(1, 8) == 25  # still an integer >= 1 per gateway
    assert frr.link_bandwidth(0.001, 8) == 1 and frr.link_bandwidth(100, 0) <= 25600


def test_weight_commands_set_both_route_maps_and_resend() -> None:
    cmds = frr.weight_commands(1000, drain=False, v6=True)
    assert cmds.count("set extcommunity bandwidth 1000") == 3  # anycast, facing v4, facing v6
    assert "no bgp graceful-shutdown" in cmds and cmds[-1] == "clear bgp ipv6 unicast * soft out"
    drain = frr.weight_commands(None, drain=True, v6=False)
    assert "bgp graceful-shutdown" in drain and "no set extcommunity bandwidth" in drain
    assert not any("ipv6" in c for c in drain)


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
