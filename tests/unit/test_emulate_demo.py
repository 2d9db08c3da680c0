"""Demo accounting and counter parsing (no root): /proc/stat samples, idle baseline, nft JSON."""

from __future__ import annotations

import json

import pytest

from crosszone.linux import netns
from crosszone_lab.emulate import crosszone_gateway as xgw
from crosszone_lab.emulate import demo, frr, legacy_gateway, storage, topology
from crosszone_lab.emulate.kinds import DeployError
from crosszone_lab.workload import runner

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


def test_nft_forwarded_counters_are_apart_from_drops_and_both_families() -> None:
    doc = {"nftables": [
        {"counter": {"family": "ip", "name": "forwarded", "table": "czgw", "packets": 30}},
        {"counter": {"family": "ip6", "name": "forwarded", "table": "czgw", "packets": 12}},
        {"counter": {"family": "ip", "name": "dropped", "table": "czgw", "packets": 5}},
        {"counter": {"family": "ip", "name": "forwarded", "table": "other", "packets": 900}},
    ]}
    assert legacy_gateway.forwarded_packets(json.dumps(doc)) == 42
    no_forwarded = {"nftables": [doc["nftables"][2]]}
    with pytest.raises(DeployError, match="no czgw `forwarded` counter"):
        legacy_gateway.forwarded_packets(json.dumps(no_forwarded))


def test_the_forwarded_counter_comes_after_the_echoes_and_before_the_vpc_map() -> None:
    from tests.unit.test_emulate_queues import _plan  # a plan with the fast reroute on

    lines = legacy_gateway.nft_ruleset(_plan()).splitlines()
    echo = next(i for i, x in enumerate(lines) if "echo-request" in x)
    counted = lines.index('    counter name "forwarded"')
    vmap = next(i for i, x in enumerate(lines) if "vmap" in x)
    assert echo < counted < vmap


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


def _row(kind: str, errors: int) -> demo.Row:
    res = runner.WorkloadResult(duration_s=20.0, endpoints=8, errors=errors,
                                error_samples=["h1-a: range read: TimeoutError('timed out')"]
                                * errors)
    return demo.Row(kind, res, demo.CpuSample(1.0, 2.0), 0.1, {}, 0)


def test_baseline_errors_are_reported_and_do_not_fail_the_demo() -> None:
    rc, notes = demo.verdict([_row("legacy", 21), _row("crosszone", 0)], "legacy",
                             ["crosszone"])
    assert rc == 0
    assert len(notes) == 1 and "legacy (baseline): 21 errors" in notes[0]
    table = demo.comparison_table([_row("legacy", 21), _row("crosszone", 0)])
    assert list(table.columns[-1].cells) == ["21 (baseline)", "0"]


@pytest.mark.parametrize("rows", [
    [("legacy", 0), ("crosszone", 1)],
    [("legacy", 5), ("crosszone", 3)],
    [("legacy", 0)],  # no crosszone row at all
])
def test_crosszone_errors_or_a_missing_crosszone_run_fail_the_demo(
        rows: list[tuple[str, int]]) -> None:
    rc, notes = demo.verdict([_row(k, e) for k, e in rows], "legacy", ["crosszone"])
    assert rc == 1 and any("crosszone" in n for n in notes)


def test_forwarding_part_fails_on_bad_or_missing_crosszone_frames() -> None:
    from crosszone_lab.demo import forwarding_problems

    good = {"corrupted": 0, "misrouted": 0}
    assert forwarding_problems({"legacy": {"corrupted": 3, "misrouted": 0},
                                "crosszone": good, "floor": good}) == []
    assert forwarding_problems({"floor": good}) == ["crosszone: no forwarding row"]
    assert forwarding_problems({"crosszone": {"corrupted": 0, "misrouted": 2}, "floor": good})


def test_bfdd_runs_real_time_and_the_workload_below_the_network() -> None:
    # Finding 17: on a busy box a bfdd at normal priority missed its 150 ms detection time
    # (BGP hard resets, routes gone, 10 s TCP timeouts); the applications yield to the network.
    p = topology.plan(topology.parse({"vpcs": [
        {"name": "a", "vni": 1001, "prefix": "192.168.0.0/16",
         "storage_facing": "100.64.0.0/16"}]}))
    ops = frr.start_ops(p.compute_router_ns, "", p.spec)
    argvs = [op.argv for op in ops if isinstance(op, netns.Cmd)]
    bfdd = next(a for a in argvs if any(x.endswith("/bfdd") for x in a))
    i = bfdd.index("chrt")
    assert bfdd[i:i + 3] == ("chrt", "-f", str(frr.BFDD_RT_PRIORITY))
    # bgpd, zebra and staticd can be busy for long: never real-time
    assert not any("chrt" in a for a in argvs if not any(x.endswith("/bfdd") for x in a))
    argv = runner.worker_argv(topology.workload_targets(p), 0, 5.0, 2)
    assert argv[argv.index("--nice") + 1] == str(runner.WORKLOAD_NICE) and runner.WORKLOAD_NICE > 0
    assert f"worker_priority {runner.WORKLOAD_NICE};" in storage.nginx_config(
        p, p.storage_nodes[0])


def test_the_storage_nodes_priority_is_the_topologys() -> None:
    """`storage.nice` sets the nginx worker's priority (the policy topology runs it at 0, the
    others at the workload's nice); a value outside -20..19 is refused, naming the field."""
    policy = topology.plan(topology.load(demo.POLICY_TOPOLOGY))
    assert policy.spec.storage.nice == 0
    assert "worker_priority 0;" in storage.nginx_config(policy, policy.storage_nodes[0])
    base = topology.plan(topology.load(topology.DEFAULT_TOPOLOGY))
    assert base.spec.storage.nice == runner.WORKLOAD_NICE
    vpcs = [{"name": "a", "vni": 1001, "prefix": "192.168.0.0/16",
             "storage_facing": "100.64.0.0/16"}]
    p = topology.plan(topology.parse({"vpcs": vpcs, "storage": {"nice": -5}}))
    assert "worker_priority -5;" in storage.nginx_config(p, p.storage_nodes[0])
    for bad in (20, -21, "0", 1.5):
        with pytest.raises(topology.TopologyError, match="nice"):
            topology.parse({"vpcs": vpcs, "storage": {"nice": bad}})


def test_policy_rows_take_the_queues_and_policy_of_the_policy_topology() -> None:
    base = topology.plan(topology.load(topology.DEFAULT_TOPOLOGY))
    source = topology.load(demo.POLICY_TOPOLOGY)
    p = demo.with_policy_queues(base, source)
    assert base.spec.queues is None and p.spec.queues == source.queues
    assert p.spec.policy.elephant_bytes == source.policy.elephant_bytes
    assert not p.spec.policy.enabled
    assert p.namespaces == base.namespaces  # the same deployment, queues added


def test_policy_rows_write_checkpoint_parts_the_shaped_ports_carry_in_time() -> None:
    base = topology.plan(topology.load(topology.DEFAULT_TOPOLOGY))
    p = demo.with_policy_queues(base, topology.load(demo.POLICY_TOPOLOGY))
    t = demo.policy_targets(p)
    # 8 endpoints x 2 parts every 4 s: 33.6 Mbit/s per MiB of part; 0.85 x 2 x 25 = 42.5 Mbit/s.
    assert p.spec.queues is not None and p.spec.queues.rate_mbit == 25
    assert t.checkpoint_max_mib == 1
    assert demo.checkpoint_mbit(t) == pytest.approx(33.6, abs=0.1)
    assert demo.checkpoint_mbit(topology.workload_targets(p)) == pytest.approx(268.4, abs=0.1)
    argv = runner.worker_argv(t, 0, 5.0, 2)
    assert argv[argv.index("--ckpt-bytes") + 1] == str(1 << 20)
    assert t.endpoints == topology.workload_targets(base).endpoints


def test_policy_targets_keep_smaller_parts_and_unshaped_storage_ports() -> None:
    spec = topology.load(demo.POLICY_TOPOLOGY)
    two_hosts = topology.plan(spec.model_copy(update={"hosts": 2}))
    assert demo.policy_targets(two_hosts).checkpoint_max_mib == 2  # 2 MiB: 34 of 42.5 Mbit/s
    rich = topology.parse(spec.model_dump(mode="json") | {
        "hosts": 1, "queues": {"rate_mbit": 400, "links": ["storage"]}}, source="t")
    assert demo.policy_targets(topology.plan(rich)).checkpoint_max_mib == 4  # never larger
    hosts_only = topology.parse(spec.model_dump(mode="json") | {
        "queues": {"rate_mbit": 1, "links": ["hosts"]}}, source="t")
    assert demo.policy_targets(topology.plan(hosts_only)).checkpoint_max_mib == 4
    tight = topology.parse(spec.model_dump(mode="json") | {
        "queues": {"rate_mbit": 1, "links": ["storage"]}}, source="t")
    assert demo.policy_targets(topology.plan(tight)).checkpoint_max_mib == 1  # the least


def test_policy_table_compares_off_and_on() -> None:
    def res(p50_ms: int, tail_ms: int, gb: float) -> runner.WorkloadResult:
        return runner.WorkloadResult(duration_s=10, endpoints=2, read_bytes=int(gb * 1.25e9),
                                     small_lat_us=[p50_ms * 1000] * 98 + [tail_ms * 1000] * 2)

    table = demo.policy_table("crosszone", {"off": res(100, 400, 1.0), "on": res(10, 200, 0.9)})
    assert table.row_count == 2
    assert "p50 10.0x, p99 2.0x better" in str(table.caption) and "0.90" in str(table.caption)


@pytest.mark.parametrize(("cpus", "bfd", "loader"),
                         [(1, "", ""), (2, "0", "1-1"), (3, "0", "1-2"), (8, "0", "1-7")])
def test_bfdd_and_the_fast_path_loader_never_share_a_cpu(
        monkeypatch: pytest.MonkeyPatch, cpus: int, bfd: str, loader: str) -> None:
    # The loader's bpf() calls hold their CPU for up to a second on a kernel that does not
    # preempt system calls: bfdd, pinned elsewhere, keeps sending and timing its packets.
    monkeypatch.setattr(frr.os, "cpu_count", lambda: cpus)
    assert frr.control_cpus() == (bfd, loader)
    p = topology.plan(topology.parse({"vpcs": [
        {"name": "a", "vni": 1001, "prefix": "192.168.0.0/16",
         "storage_facing": "100.64.0.0/16"}], "gateways": {"crosszone": 1}}))
    ops = frr.start_ops(p.compute_router_ns, "", p.spec)
    bfdd = next(op.argv for op in ops
                if isinstance(op, netns.Cmd) and any(x.endswith("/bfdd") for x in op.argv))
    attach = [op.argv for op in xgw.attach_ops(p.gateways[0]) if isinstance(op, netns.Cmd)][-1]
    if bfd:
        assert bfdd[bfdd.index("taskset"):bfdd.index("taskset") + 3] == ("taskset", "-c", bfd)
    else:
        assert "taskset" not in bfdd
    if loader:
        assert attach[:3] == ("taskset", "-c", loader)
        assert "0" not in loader.split("-")[0]
    else:
        assert "taskset" not in attach


@pytest.mark.parametrize("verbose", [False, True])
def test_raw_json_documents_only_when_verbose(verbose: bool) -> None:
    from rich.console import Console

    console = Console(record=True, width=200)
    demo.print_comparison(console, [_row("legacy", 0), _row("crosszone", 0)], verbose)
    text = console.export_text()
    assert "legacy vs crosszone" in text  # the table, always
    assert ('"gateway": "crosszone"' in text) is verbose
    assert ('"workload"' in text) is verbose
