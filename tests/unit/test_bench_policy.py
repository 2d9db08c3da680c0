"""`crosszone bench policy` without root: its counters, lines and summary."""

from __future__ import annotations

import pytest

from crosszone_lab.bench import fairness, policy
from crosszone_lab.workload import runner

pytestmark = pytest.mark.unit

SNMP = """Ip: Forwarding DefaultTTL
Ip: 1 64
Tcp: RtoAlgorithm InSegs OutSegs
Tcp: 1 1000 900
"""
NETSTAT = """TcpExt: SyncookiesSent TCPOFOQueue TCPSACKReorder TCPTSReorder
TcpExt: 0 25 3 2
"""


def test_counters_pair_names_with_values() -> None:
    c = policy._counters(SNMP + NETSTAT)
    assert c["TcpInSegs"] == 1000 and c["TcpExtTCPOFOQueue"] == 25 and c["IpDefaultTTL"] == 64


def test_tcp_counters_count_detected_reordering_over_segments_sent() -> None:
    from crosszone.linux.netns import RecordingExecutor

    ex = RecordingExecutor()
    ex.output = lambda argv, check=True: SNMP + NETSTAT  # type: ignore[method-assign]
    assert policy.tcp_counters(ex, ["n1", "n2"]) == (1800, 10)


def _res(p99_ms: float, loader_gbps: float) -> runner.WorkloadResult:
    return runner.WorkloadResult(duration_s=10.0, endpoints=2,
                                 read_bytes=int(loader_gbps * 10 / 8 * 1e9),
                                 small_lat_us=[1000] * 980 + [int(p99_ms * 1000)] * 20)


def test_round_line_has_the_contract_keys() -> None:
    line = policy.round_line("crosszone", "on", 0, _res(5, 0.4), segs=2000, reordered=10)
    for key in ("policy", "small_p50_ms", "small_p99_ms", "small_p999_ms", "bulk_gbps",
                "checkpoint_gbps", "reordered_pct"):
        assert key in line
    assert line["reordered_pct"] == 0.5 and line["bulk_gbps"] == 0.4
    assert policy.round_line("legacy", "off", 0, _res(5, 0.4), 0, 0)["reordered_pct"] == 0.0


def test_summary_uses_medians_and_checks_the_targets() -> None:
    lines = [policy.round_line("crosszone", s, r, _res(p99, g), 1, 0)
             for r, (s, p99, g) in enumerate([("off", 100, 0.40), ("on", 10, 0.39),
                                              ("off", 120, 0.41), ("on", 30, 0.40),
                                              ("off", 80, 0.40), ("on", 20, 0.38)])]
    lines.append(policy.round_line("legacy", "on", 0, _res(1, 9.0), 1, 0))  # another kind
    s = policy.summary("crosszone", lines, floor_p99=8.0)
    assert s["summary"] is True and s["gateway"] == "crosszone"
    assert s["small_p99_improvement"] == 5.0  # median 100 / median 20
    assert s["bulk_goodput_ratio"] == pytest.approx(0.39 / 0.40, abs=1e-3)
    assert s["on_p99_over_floor"] == 2.5 and s["on_round_errors"] == [0, 0, 0]
    assert s["met"] is True  # 5.0 >= 5, 0.975 >= 0.95, 2.5 <= 3, no error with the policy on
    assert s["ceiling_small_p99_improvement"] == 12.5
    slower_bulk = [dict(ln, bulk_gbps=0.3) if ln["policy"] == "on" else ln for ln in lines]
    assert policy.summary("crosszone", slower_bulk, None)["met"] is False
    # the floor 4 ms: the on p99 of 20 ms is 5x it, over the 3x target
    assert policy.summary("crosszone", lines, floor_p99=4.0)["met"] is False
    one_error = [dict(ln, errors=1) if ln["policy"] == "on" and ln["round"] == 3 else ln
                 for ln in lines]
    s = policy.summary("crosszone", one_error, floor_p99=8.0)
    assert s["on_round_errors"] == [0, 1, 0] and s["met"] is False


def test_summary_without_rounds_does_not_divide_by_zero() -> None:
    s = policy.summary("legacy", [], None)
    assert s["small_p99_improvement"] == 0.0 and s["met"] is False
    assert "floor_small_p99_ms" not in s


TC_CLASSES = """class htb 1:1 root rate 40Mbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 5000 bytes 5 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
class htb 1:12e parent 1:1 leaf 12e: prio 0 rate 35600Kbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 1000 bytes 4 pkt (dropped 1, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
class htb 1:200 parent 1:1 leaf 200: prio 1 rate 4Mbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 0 bytes 0 pkt (dropped 0, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
class htb 1:10a parent 1:1 leaf 10a: prio 2 rate 400Kbit ceil 40Mbit burst 1600b cburst 1600b
 Sent 4000 bytes 1 pkt (dropped 7, overlimits 0 requeues 0)
 backlog 0b 0p requeues 0
"""


def test_queue_counters_name_the_classes_and_sum_each_group() -> None:
    from pathlib import Path

    from crosszone.linux.netns import RecordingExecutor
    from crosszone_lab.emulate import topology

    p = topology.plan(topology.load(Path(policy.POLICY_TOPOLOGY)))
    ex = RecordingExecutor()
    ex.output = lambda argv, check=True: TC_CLASSES  # type: ignore[method-assign]
    q = policy.queue_counters(ex, p)
    assert set(q) == {"hosts", "storage"}  # the topology shapes those two groups
    hosts = len(p.hosts)
    assert q["hosts"]["small"] == {"bytes": 1000 * hosts, "packets": 4 * hosts, "drops": hosts}
    assert q["hosts"]["bulk"]["drops"] == 7 * hosts and q["hosts"]["default"]["bytes"] == 0
    assert "1:1" not in q["hosts"]  # the root class is no traffic class
    d = policy.queue_delta(q, policy.queue_counters(ex, p))
    assert d["storage"]["bulk"] == {"bytes": 0, "packets": 0, "drops": 0}


AGENT_METRICS = """# TYPE crosszone_policy_marked_packets_total counter
crosszone_policy_marked_packets_total{class="small",vpc="a"} 10.0
crosszone_policy_marked_packets_total{class="bulk",vpc="a"} 30.0
crosszone_policy_marked_packets_total{class="small",vpc="b"} 5.0
crosszone_policy_marked_bytes_total{class="small",vpc="a"} 1000.0
crosszone_policy_marked_bytes_total{class="bulk",vpc="a"} 45000.0
crosszone_policy_bare_packets_total{vpc="a"} 6.0
crosszone_policy_marked_bytes_total_created{class="small",vpc="a"} 1.7e9
"""


def test_fastpath_classes_sum_gateways_and_vpcs_per_class() -> None:
    got = policy.fastpath_classes([AGENT_METRICS, AGENT_METRICS])
    assert got == {"small": {"packets": 30, "bytes": 2000, "bare": 12},
                   "bulk": {"packets": 60, "bytes": 90000}}
    assert policy.class_delta(policy.fastpath_classes([AGENT_METRICS]), got)["bulk"] == {
        "packets": 30, "bytes": 45000}


def test_every_error_is_named_with_its_cause() -> None:
    res = runner.WorkloadResult(duration_s=10.0, endpoints=2, errors=4, error_samples=[
        "h1-a: checkpoint PUT: TimeoutError('timed out')",
        "h2-b: checkpoint PUT: TimeoutError('timed out')",
        "h2-b/small: small request: ConnectionResetError(104)"])
    causes = policy.round_line("crosszone", "on", 0, res, 1, 0)["error_causes"]
    assert causes == {"checkpoint PUT: TimeoutError('timed out')": 2,
                      "small request: ConnectionResetError(104)": 1,
                      "(more errors than the workers' five samples each)": 1}
    assert policy.error_causes(runner.WorkloadResult(duration_s=1.0, endpoints=1)) == {}


def test_recovery_counts_rtos_and_tail_loss_probes() -> None:
    before = {"TcpRetransSegs": 10, "TcpExtTCPTimeouts": 1, "TcpExtTCPLossProbes": 2}
    after = {"TcpRetransSegs": 15, "TcpExtTCPTimeouts": 1, "TcpExtTCPLossProbes": 5,
             "TcpExtTCPSynRetrans": 1}
    assert policy.recovery(before, after) == {"retrans_segs": 5, "rtos": 0, "tlps": 3,
                                              "syn_retrans": 1}


def test_softnet_sums_the_cpus_hex_columns() -> None:
    text = ("0000a000 00000002 0000000f 00000000 00000000\n"
            "00000100 00000000 00000001 00000000 00000000\n")
    assert policy.softnet(text) == {"processed": 0xa100, "dropped": 2, "time_squeeze": 16}


def _tenant_result() -> runner.WorkloadResult:
    res = runner.WorkloadResult(duration_s=10.0, endpoints=4)
    for name, gb, lat in (("h1-a", 0.3, 50), ("h2-a", 0.3, 70), ("h1-b", 0.1, 5), ("h2-b", 0.1, 6)):
        # Whole blocks at completion (read_bytes) overstate the window; goodput is timed bytes.
        res.per_endpoint[name] = {"read_bytes": int(gb * 20 / 8 * 1e9),
                                  "timed_read_bytes": int(gb * 10 / 8 * 1e9), "written_bytes": 0,
                                  "small": 1, "errors": 0, "small_lat_us": [lat * 1000] * 10}
    return res


def test_fairness_splits_goodput_and_latency_by_tenant() -> None:
    t = fairness.tenants(_tenant_result(), 10.0)
    assert t["a"]["bulk_gbps"] == pytest.approx(0.6) and t["b"]["bulk_gbps"] == pytest.approx(0.2)
    assert t["a"]["small_p99_ms"] == 70.0 and t["b"]["small_p99_ms"] == 6.0
    line = fairness.round_line("off", 0, _tenant_result(), "a", 10.0, rate_drops=7)
    assert line["other_share"] == 0.25 and line["bulk_gbps"] == pytest.approx(0.8)
    assert line["rate_drops"] == 7 and line["errors"] == 0


def test_fairness_line_of_a_round_without_goodput_has_no_share() -> None:
    res = runner.WorkloadResult(duration_s=10.0, endpoints=0)
    line = fairness.round_line("on", 1, res, "a", 10.0)
    assert line["other_share"] == 0.0 and line["tenants"] == {} and line["bulk_gbps"] == 0.0


def _fair_line(setting: str, greedy_gbps: float, other_gbps: float) -> dict[str, object]:
    total = greedy_gbps + other_gbps
    return {"fairness": setting, "tenants": {"a": {"bulk_gbps": greedy_gbps},
                                             "b": {"bulk_gbps": other_gbps}},
            "bulk_gbps": total, "other_share": round(other_gbps / total, 3)}


def test_fairness_summary_uses_medians_and_meets_the_fair_share() -> None:
    lines = [_fair_line("off", 0.12, 0.03), _fair_line("on", 0.07, 0.08),
             _fair_line("on", 0.06, 0.09), _fair_line("off", 0.11, 0.02),
             _fair_line("on", 0.08, 0.07)]
    s = fairness.summary(lines, "a", 40, gateways=2, n_tenants=2)
    assert s["summary"] is True and s["greedy"] == "a" and s["greedy_rate_mbps"] == 40
    assert s["greedy_cap_gbps"] == 0.08  # 40 Mbit/s on each of 2 gateways
    assert s["other_share_on"] == 0.533  # median of 0.533, 0.6, 0.467
    assert s["other_share_off"] == pytest.approx((0.2 + 0.154) / 2, abs=1e-3)
    assert s["greedy_gbps_off"] == pytest.approx(0.115) and s["greedy_gbps_on"] == 0.07
    assert s["bulk_gbps_off"] == pytest.approx(0.14) and s["bulk_gbps_on"] == 0.15
    assert s["targets"] == {"other_share_on": 0.45} and s["met"] is True


def test_fairness_summary_misses_the_target_below_the_fair_share() -> None:
    lines = [_fair_line("off", 0.12, 0.03), _fair_line("on", 0.09, 0.06)]
    s = fairness.summary(lines, "a", 40, gateways=2)
    assert s["other_share_on"] == 0.4 and s["met"] is False
    # Three tenants: the two others' fair share is 2/3, so 0.6 of the goodput is 0.9 of it.
    assert fairness.summary([_fair_line("on", 0.4, 0.6)], "a", 40, n_tenants=3)["met"] is True
    assert fairness.summary([_fair_line("on", 0.41, 0.59)], "a", 40, n_tenants=3)["met"] is False


def test_fairness_summary_without_rounds_is_not_met() -> None:
    s = fairness.summary([], "a", 40)
    assert s["other_share_on"] == 0.0 and s["met"] is False
    assert fairness.summary([_fair_line("off", 0.1, 0.1)], "a", 40)["met"] is False


def test_fair_rate_is_the_greedy_tenants_share_of_the_host_ports_per_gateway() -> None:
    from crosszone_lab.emulate import topology

    spec = topology.load(fairness.POLICY_TOPOLOGY)
    assert fairness.fair_rate_mbps(topology.plan(spec)) == 25  # 25 x 4 / 2 / 2
    one_gw = topology.parse(spec.model_dump(mode="json") | {
        "hosts": 2, "gateways": {"crosszone": 1, "legacy": 1}}, source="t")
    assert fairness.fair_rate_mbps(topology.plan(one_gw)) == 25  # 25 x 2 / 2 / 1
    unshaped = topology.parse(spec.model_dump(mode="json") | {"queues": None}, source="t")
    with pytest.raises(ValueError, match="--rate-mbps"):
        fairness.fair_rate_mbps(topology.plan(unshaped))
    storage_only = topology.parse(spec.model_dump(mode="json") | {
        "queues": {"rate_mbit": 40, "links": ["storage"]}}, source="t")
    with pytest.raises(ValueError, match="shaped host ports"):
        fairness.fair_rate_mbps(topology.plan(storage_only))


def test_vpc_rates_reach_the_cluster_intent() -> None:
    from crosszone_lab.emulate import control_plane, topology
    from crosszone_lab.emulate import policy as pol

    p = topology.plan(topology.load(fairness.POLICY_TOPOLOGY))
    assert all("rate_mbps" not in v for v in control_plane.cluster_intent(p)["vpcs"])
    limited = pol.with_vpc_rates(p, {"a": 50})
    vpcs = {v["name"]: v for v in control_plane.cluster_intent(limited)["vpcs"]}
    assert vpcs["vpc-a"]["rate_mbps"] == 50 and "rate_mbps" not in vpcs["vpc-b"]
    assert pol.with_vpc_rates(limited, {"a": None}).spec == p.spec


def test_small_requests_apart_run_raised_without_bulk() -> None:
    from crosszone_lab.emulate import topology

    t = topology.workload_targets(topology.plan(topology.load(fairness.POLICY_TOPOLOGY)))
    bulk = runner.worker_argv(t, 0, 5.0, 2, role="bulk")
    small = runner.worker_argv(t, 0, 5.0, 2, role="small")
    assert bulk[bulk.index("--nice") + 1] == str(runner.WORKLOAD_NICE)
    assert bulk[bulk.index("--small-rate") + 1] == "0"
    # the probes run above everything else the workload starts, and above the default
    assert small[small.index("--nice") + 1] == str(runner.PROBE_NICE)
    assert runner.PROBE_NICE < 0 < runner.WORKLOAD_NICE
    assert small[small.index("--loaders", small.index("--loaders") + 1) + 1] == "0"
    assert small[small.index("--ckpt-parallel") + 1] == "0"


def test_the_bench_offers_checkpoints_that_fit_the_shaped_storage_ports(monkeypatch) -> None:
    """The rounds' workload is the demo's policy workload: checkpoint parts of 1 MiB on the
    policy topology (8 endpoints, 34 Mbit/s into 2 x 25), not the topology's 4 MiB (at 2 x 40,
    134 into 80 timed out 1-4 PUTs a round whatever the policy)."""
    from crosszone_lab.bench import policy as bench
    from crosszone_lab.emulate import demo, topology

    p = topology.plan(topology.load(bench.POLICY_TOPOLOGY))
    seen: list[runner.Targets] = []

    def run(targets, **_kw):
        seen.append(targets)
        return runner.WorkloadResult(duration_s=1.0, endpoints=len(targets.endpoints))

    monkeypatch.setattr(bench.runner, "run", run)
    monkeypatch.setattr(bench, "ns_counters", lambda ex, names: {})
    monkeypatch.setattr(bench, "queue_counters", lambda ex, plan: {})
    monkeypatch.setattr(bench, "_agents_metrics", lambda plan: [])
    bench._measure(None, p, None, 1.0, 0.0)
    assert [t.checkpoint_max_mib for t in seen] == [1]
    assert p.spec.storage.checkpoint_max_mib == 4
    capacity = p.spec.queues.rate_mbit * len(p.storage_nodes)
    assert demo.checkpoint_mbit(seen[0]) <= demo.POLICY_CHECKPOINT_LOAD * capacity
