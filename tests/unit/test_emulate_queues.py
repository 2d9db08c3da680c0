"""The traffic policy in the emulator without root: the queues' tc commands (golden), the
legacy gateway's marking rules, the crosszone intent's policy block, the topology's checks.

Regenerate the golden files after an intended change:
CZ_UPDATE_GOLDEN=1 pytest tests/unit/test_emulate_queues.py
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.test_emulate_frr import _golden

from crosszone.abi.objects import BUILD_DIR
from crosszone.intent.cluster import parse_cluster
from crosszone.linux.netns import Cmd
from crosszone_lab.emulate import control_plane, legacy_gateway, policy, queues, topology

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "two-zone-policy.yaml"


def _raw(**changes: Any) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    raw.update(changes)
    return raw


def _plan(**changes: Any) -> topology.Plan:
    return topology.plan(topology.parse(_raw(**changes)))


def _text(ops: list[Cmd]) -> str:
    return "\n".join(str(op) for op in ops).replace(str(BUILD_DIR), "<build>") + "\n"


def test_queue_commands_golden() -> None:
    _golden("queues.tc", _text(queues.plan_ops(_plan())))


def test_legacy_ruleset_with_policy_golden() -> None:
    p = _plan(policy={"enabled": True, "elephant_bytes": 2097152})
    _golden("legacy-policy.nft", legacy_gateway.nft_ruleset(p))


def test_constants_mirror_the_c_header() -> None:
    header = (ROOT / "src/crosszone/fastpath/bpf/tc_queue.h").read_text()
    found = dict(re.findall(r"#define (CZ_QUEUE_\w+)\s+(\w+)", header))
    assert int(found["CZ_QUEUE_MAJOR"], 0) == queues.QUEUE_MAJOR
    assert int(found["CZ_QUEUE_DSCP_BASE"], 0) == queues.QUEUE_DSCP_BASE
    assert queues.class_minor(63) < queues.DEFAULT_MINOR


def test_every_shaped_port_gets_three_classes_and_the_classifier() -> None:
    p = _plan(queues={"rate_mbit": 50, "links": ["hosts", "storage", "gateways"]})
    ports = queues.ports(p)
    assert len(ports) == len(p.hosts) + len(p.storage_nodes) + 2 * len(p.gateways)
    text = _text(queues.plan_ops(p))
    for ns, dev in ports:
        mine = [ln for ln in text.splitlines() if ln.startswith(f"ip netns exec {ns} ")
                and f" dev {dev} " in ln]
        assert sum(" htb rate " in ln for ln in mine) == 4  # root + three classes
        assert sum(" bfifo " in ln for ln in mine) == 3
        assert sum(" bpf obj " in ln for ln in mine) == 1


def test_only_chosen_links_are_shaped() -> None:
    p = _plan(queues={"rate_mbit": 100, "links": ["storage"]})
    assert {ns for ns, _ in queues.ports(p)} == {p.storage_router_ns}
    assert queues.plan_ops(_plan(queues=None)) == []


def test_class_rates_add_up_to_the_link() -> None:
    for rate in (1, 7, 100, 100_000):
        small, default, bulk = queues.class_rates_kbit(rate)
        assert small + default + bulk == rate * 1000
        assert small > default > 0 and default >= bulk > 0


def test_small_and_bulk_classes_follow_the_policy_dscp() -> None:
    p = _plan(policy={"small_dscp": 34, "bulk_dscp": 8})
    text = _text(queues.plan_ops(p))
    assert "classid 1:122 htb" in text and " prio 0 " in text  # 0x100 + 34
    assert "classid 1:108 htb" in text  # 0x100 + 8
    assert "classid 1:12e" not in text
    with pytest.raises(ValueError):
        queues.class_minor(64)
    with pytest.raises(ValueError):
        queues.port_ops("ns", "dev", queues.QueueSpec(rate_mbit=1), 10, 10)


@pytest.mark.parametrize("changes, field", [
    ({"queues": {"rate_mbit": 0}}, "queues.rate_mbit"),
    ({"queues": {"rate_mbit": 100, "links": ["routers"]}}, "queues.links"),
    ({"queues": {"rate_mbit": 100, "links": []}}, "queues.links"),
    ({"queues": {"rate_mbit": 100, "burst": 3}}, "queues.burst"),
    ({"queues": {"rate_mbit": 100, "limit_kbytes": 1}}, "queues.limit_kbytes"),
    ({"policy": {"small_dscp": 64}}, "policy.small_dscp"),
    ({"policy": {"enabled": "yes"}}, "policy.enabled"),
    ({"policy": {"colour": 1}}, "policy.colour"),
    ({"policy": {"small_dscp": 10, "bulk_dscp": 10}}, "small_dscp and bulk_dscp"),
])
def test_bad_queue_and_policy_settings_are_rejected(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(topology.TopologyError, match=re.escape(field)):
        topology.parse(_raw(**changes), source="t.yaml")


def test_legacy_without_policy_tracks_nothing_and_marks_nothing() -> None:
    text = legacy_gateway.nft_ruleset(_plan())
    assert "ct " not in text and "dscp" not in text
    assert text.count("notrack") == 4


def test_legacy_policy_marks_by_flow_bytes_and_leaves_syn_untracked() -> None:
    p = _plan(policy={"enabled": True, "elephant_bytes": 12345, "small_dscp": 40,
                      "bulk_dscp": 2})
    lines = legacy_gateway.nft_ruleset(p).splitlines()
    assert "    ct bytes < 12345 ip dscp set 40" in lines
    assert "    ct bytes >= 12345 ip dscp set 2" in lines
    for v, vpc in enumerate(p.spec.vpcs, start=1):
        dev = f'iifname "vx-{vpc.name}"'
        rules = [ln for ln in lines if dev in ln and "saddr set" in ln]
        # The SYN rule first: after it rewrote the source the general rule no longer matches.
        assert len(rules) == 2 and "tcp flags" in rules[0] and rules[0].endswith("notrack")
        assert rules[1].endswith(f"ct zone set {v}")
    ops = [str(op) for op in legacy_gateway.policy_ops(p, p.gateways[0])]
    assert any("nf_conntrack_acct=1" in op for op in ops)


def test_crosszone_intent_carries_the_policy() -> None:
    p = _plan(policy={"enabled": True, "elephant_bytes": 4096, "small_dscp": 46,
                      "bulk_dscp": 8, "flowlet_gap_us": 200})
    cluster = parse_cluster(yaml.safe_dump(control_plane.cluster_intent(p)))
    assert cluster.policy.elephant_bytes == 4096
    assert cluster.policy.bulk_dscp == 8 and cluster.policy.flowlet_gap_us == 200
    assert cluster.policy.enabled is True
    off = parse_cluster(yaml.safe_dump(control_plane.cluster_intent(policy.with_policy(p, False))))
    assert off.policy.enabled is False


def test_policy_switch_reloads_every_legacy_gateway() -> None:
    p = _plan()
    on = policy.with_policy(p, True)
    assert on.spec.policy.enabled and not p.spec.policy.enabled
    assert on.spec.policy.elephant_bytes == p.spec.policy.elephant_bytes
    ops = [str(op) for op in policy.legacy_ops(on)]
    assert sum("nft -f -" in op for op in ops) == len(on.gateways_of("legacy"))
    assert all(any(g.ns in op for op in ops) for g in on.gateways_of("legacy"))
    off_ops = policy.legacy_ops(p)
    assert not any("conntrack" in str(op) for op in off_ops)


TC_CLASSES = """class htb 1:1 root rate 40Mbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 74935485 bytes 50236 pkt (dropped 0, overlimits 40916 requeues 0)
 backlog 0b 0p requeues 0
class htb 1:12e parent 1:1 leaf 8a13: prio 0 rate 35600Kbit ceil 40Mbit burst 1593b cburst 1600b
 Sent 11436508 bytes 9617 pkt (dropped 18, overlimits 6391 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_class_stats_from_tc_text() -> None:
    stats = queues.class_stats(TC_CLASSES)
    assert stats["1:12e"] == {"bytes": 11436508, "packets": 9617, "drops": 18,
                              "backlog_bytes": 0}
    assert stats["1:1"]["packets"] == 50236
    assert queues.class_stats("") == {}


# `tc -s class show dev h1` (iproute2 6.1) on a shaped port under load: htb's own lines
# (lended, tokens) between the classes, a backlog in bytes, one tc rounded to KiB, and a class
# with a rate estimator, whose backlog follows the rate on the same line.
TC_LOADED = """class htb 1:1 root rate 40Mbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 98127734 bytes 65519 pkt (dropped 0, overlimits 51230 requeues 0)
 backlog 0b 0p requeues 0
 lended: 20016 borrowed: 0 giants: 0
 tokens: -4875 ctokens: -4875

class htb 1:12e parent 1:1 leaf 8013: prio 0 rate 35600Kbit ceil 40Mbit burst 1593b cburst 1600b
 Sent 2411852 bytes 4102 pkt (dropped 0, overlimits 113 requeues 0)
 backlog 1514b 1p requeues 0
 lended: 4102 borrowed: 0 giants: 0
 tokens: 5301 ctokens: 4812

class htb 1:200 parent 1:1 leaf 8014: prio 1 rate 4Mbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 1048230 bytes 812 pkt (dropped 3, overlimits 40 requeues 0)
 rate 2104bit 2pps backlog 12Kb 8p requeues 0
 lended: 700 borrowed: 112 giants: 0
 tokens: 46125 ctokens: 4812

class htb 1:10a parent 1:1 leaf 8015: prio 2 rate 400Kbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 94667652 bytes 60605 pkt (dropped 2211, overlimits 51077 requeues 0)
 backlog 1Mb 693p requeues 0
 lended: 2 borrowed: 20014 giants: 0
 tokens: -1914 ctokens: -4875

"""


def test_class_stats_parse_the_backlog_in_every_unit_tc_prints() -> None:
    stats = queues.class_stats(TC_LOADED)
    assert stats["1:12e"] == {"bytes": 2411852, "packets": 4102, "drops": 0,
                              "backlog_bytes": 1514}
    assert stats["1:200"] == {"bytes": 1048230, "packets": 812, "drops": 3,
                              "backlog_bytes": 12 * 1024}  # after the rate estimator's figures
    assert stats["1:10a"]["backlog_bytes"] == 1024 * 1024 and stats["1:10a"]["drops"] == 2211
    assert set(stats) == {"1:1", "1:12e", "1:200", "1:10a"}


@pytest.mark.parametrize("text,want", [("0b", 0), ("1514b", 1514), ("12Kb", 12288),
                                       ("3Mb", 3 * 1024**2), ("2Gb", 2 * 1024**3),
                                       ("12", None), ("12kb", None), ("-1b", None),
                                       ("b", None), ("12 Kb", None), ("", None)])
def test_tc_size(text: str, want: int | None) -> None:
    assert queues.tc_size(text) == want


def test_class_stats_without_a_backlog_line_or_with_a_bad_one() -> None:
    text = """class htb 1:200 parent 1:1 leaf 8014: prio 1 rate 4Mbit ceil 40Mbit
 Sent 10 bytes 1 pkt (dropped 0, overlimits 0 requeues 0)
class htb 1:10a parent 1:1 leaf 8015: prio 2 rate 400Kbit ceil 40Mbit
 Sent 20 bytes 2 pkt (dropped 1, overlimits 0 requeues 0)
 backlog lots 3p requeues 0
"""
    stats = queues.class_stats(text)
    assert stats == {"1:200": {"bytes": 10, "packets": 1, "drops": 0},
                     "1:10a": {"bytes": 20, "packets": 2, "drops": 1}}  # no backlog made up


def test_port_groups_name_the_link_set_of_every_shaped_port() -> None:
    p = _plan(queues={"rate_mbit": 50, "links": ["hosts", "storage", "gateways"]})
    groups = queues.port_groups(p)
    assert [(ns, dev) for _g, ns, dev in groups] == queues.ports(p)
    assert {g for g, ns, _dev in groups if ns == p.compute_router_ns} == {"hosts"}
    assert {g for g, ns, _dev in groups if ns == p.storage_router_ns} == {"storage"}
    assert {g for g, ns, _dev in groups if ns in {gw.ns for gw in p.gateways}} == {"gateways"}
    assert queues.port_groups(_plan(queues=None)) == []


def test_class_names_follow_the_policy_dscp() -> None:
    assert queues.class_names(34, 8) == {"1:122": "small", "1:200": "default", "1:108": "bulk"}


def test_storage_nodes_reflect_the_syn_class_only_with_queues() -> None:
    p = _plan()
    ops = queues.reflect_ops(p)
    assert [op.argv for op in ops] == [
        ("ip", "netns", "exec", n.ns, "sysctl", "-qw", "net.ipv4.tcp_reflect_tos=1")
        for n in p.storage_nodes]
    assert len(ops) == len(p.storage_nodes) > 0
    assert queues.reflect_ops(_plan(queues=None)) == []
