"""Demo accounting and counter parsing (no root): /proc/stat samples, idle baseline, nft JSON."""

from __future__ import annotations

import json

import pytest

from crosszone.emulate import demo, frr, legacy_gateway, topology
from crosszone.emulate.kinds import DeployError
from crosszone.linux import netns

pytestmark = pytest.mark.unit

STAT = """cpu  100 0 50 1000 0 0 30 0 0 0
cpu0 60 0 20 500 0 0 10 0 0 0
cpu1 40 0 30 500 0 0 20 0 0 0
intr 0
"""


def test_cpu_sample_sums_and_per_cpu() -> None:
    s = demo.cpu_sample(STAT)
    assert s.softirq_s == pytest.approx(0.30) and s.busy_s == pytest.approx(1.80)
    assert s.per_cpu_softirq_s == pytest.approx((0.10, 0.20))
    d = demo.cpu_delta(s, demo.cpu_sample(STAT.replace(" 30 0 0 0\n", " 80 0 0 0\n", 1)))
    assert d.softirq_s == pytest.approx(0.5) and d.per_cpu_softirq_s == pytest.approx((0, 0))


def test_idle_baseline_is_a_rate_with_injected_sleep() -> None:
    samples = iter([demo.CpuSample(1.0, 5.0), demo.CpuSample(1.4, 6.0)])
    slept: list[float] = []
    rate = demo.idle_baseline(4.0, sample=lambda: next(samples), sleep=slept.append)
    assert slept == [4.0] and rate == pytest.approx(0.1)


def test_nft_dropped_counters_of_both_families() -> None:
    doc = {"nftables": [
        {"metainfo": {"version": "1.0.6"}},
        {"counter": {"family": "ip", "name": "dropped", "table": "czgw", "packets": 3}},
        {"counter": {"family": "ip6", "name": "dropped", "table": "czgw", "packets": 4}},
        {"counter": {"family": "ip", "name": "other", "table": "czgw", "packets": 100}},
    ]}
    assert legacy_gateway.dropped_packets(json.dumps(doc)) == 7


@pytest.mark.parametrize("out", ["", "garbage", "{}", '{"nftables": 5}',
                                 '{"nftables": [{"metainfo": {}}]}'])
def test_unreadable_nft_counters_raise_instead_of_counting_zero(out: str) -> None:
    # An `nft` that failed (empty output) or a gateway without its table is not "no drops".
    with pytest.raises(DeployError, match="nftables counters"):
        legacy_gateway.dropped_packets(out)


def test_kernel_nexthops_by_device() -> None:
    multi = [{"dst": "10.0.0.100", "nexthops": [
        {"gateway": "10.10.3.2", "dev": "g3", "flags": []},
        {"gateway": "10.10.4.2", "dev": "g4", "flags": ["linkdown"]}]}]
    single = [{"dst": "fd64:a::/64", "gateway": "fe80::1", "dev": "g1", "flags": []}]
    assert frr.kernel_nexthops(json.dumps(multi)) == {"g3"}
    assert frr.kernel_nexthops(json.dumps(single)) == {"g1"}
    assert frr.kernel_nexthops("") == set() and frr.kernel_nexthops("{") == set()


def _link(name: str, kind: str | None, rx: int, tx: int) -> dict:
    link: dict = {"ifname": name, "stats64": {"rx": {"dropped": rx}, "tx": {"dropped": tx}}}
    if kind:
        link["linkinfo"] = {"info_kind": kind}
    return link


def test_a_veth_drop_counts_once_at_the_sender() -> None:
    # a veth pair shows one lost packet at both ends: tx at the sender, rx at its peer
    links = [_link("h1", "veth", 7, 5), _link("vx-a", "vxlan", 2, 3), _link("lo", None, 1, 0)]
    doc = json.dumps(links)
    assert demo.link_drops(doc) == 5 + (2 + 3) + 1
    assert demo.link_drops(doc, {"h1"}) == 5
    assert demo.link_drops(doc, {"vx-a", "lo"}) == 6


@pytest.mark.parametrize("out", ["", "not json", "[]", "{}", '[{"ifname": "lo"}]',
                                 '[{"ifname": "lo", "stats64": {"rx": {}}}]'])
def test_unreadable_link_counters_raise_instead_of_counting_zero(out: str) -> None:
    with pytest.raises(DeployError, match="interface counters"):
        demo.link_drops(out)


def test_a_failing_counter_command_is_not_zero_drops() -> None:
    # A real `ip -n` on a namespace that does not exist: the command fails (also without root).
    with pytest.raises(netns.CommandFailed):
        demo.namespace_drops(netns.Executor(), "czemu-no-such-namespace-for-a-test")


def test_gateway_drops_of_an_unreadable_gateway_raise() -> None:
    p = topology.plan(topology.parse({"vpcs": [
        {"name": "a", "vni": 1001, "prefix": "192.168.0.0/16",
         "storage_facing": "100.64.0.0/16"}], "gateways": {"legacy": 1, "crosszone": 0}}))
    gw = p.gateways_of("legacy")[0]
    links = json.dumps([{"ifname": "c0", "stats64": {"rx": {"dropped": 0}, "tx": {"dropped": 0}}}])
    ex = netns.RecordingExecutor(outputs={
        ("ip", "-n", gw.ns, "-d", "-s", "-j", "link", "show"): links})
    # interfaces readable, nft gave nothing (RecordingExecutor: "" for an unknown command)
    with pytest.raises(DeployError, match="nftables counters"):
        demo.gateway_drops(ex, p, "legacy")
