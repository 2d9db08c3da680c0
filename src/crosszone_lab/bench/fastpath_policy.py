"""What the traffic policy costs per packet: `bench fastpath` scenarios with it on and off.

The same bench build of the gateway is loaded twice, once with the policy off and once with it on
(the config's CZ_CFG_POLICY; on-with-rate adds a VPC token bucket, at a rate so high that nothing
is dropped, so that the bucket's arithmetic is in the figure), and the copies are timed in
interleaved rounds on the same frame and CPU (`bench.fastpath.Loaded`, same harness, same modes).
The order of the settings rotates every round. Reported: each setting's median and fastest round,
and `policy_on_delta_ns`, the median over rounds of on - off within a round (paired: a drift of
the shared box between rounds cancels out), the figure the policy's budget (25 ns) is about.
`on_fixed_clock` is the same program built with the test clock (a map read instead of
`bpf_ktime_get_ns`, whose time never advances): its delta is the policy's own work, and
on - on_fixed_clock is what reading the clock costs on this machine.

Beside them, per mode, `policy_clock_costs`: the floor (bench_floor) plus one reading of each time
source added to a per-CPU sum (bpf/xdp_floor.c, CZ_FLOOR_CLOCK), against the floor plus the sum
alone, in interleaved rounds: what a clock costs per packet on this machine, the ceiling the
policy's design has to live under (a fine clock per packet is most of the 25 ns budget here).

A repeated frame is one flow, whose state stays in cache; the `_spread` scenario rewrites the
inner destination of every iteration (100,000 destinations, bpf/bench_spread.h), so the flow
table sees 100,000 flows and its slots miss the cache as they would under real traffic.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING

from crosszone.abi import layout as L
from crosszone.abi.reasons import Reason
from crosszone.compile.tables import Tables, rate_fields

if TYPE_CHECKING:  # bench.fastpath runs these scenarios: no import cycle at run time
    from crosszone_lab.bench.fastpath import Loaded

NO_DROP_RATE_MBPS = 100_000_000  # 100 Tbit/s: the bucket runs, nothing is over it


def with_policy(t: Tables, rate: bool = False) -> Tables:
    """The bench tables with the policy on (and every VPC at a rate nothing exceeds)."""
    vpcs = t.vpcs
    flags = t.flags | L.CZ_CFG_POLICY
    if rate:
        per_mib, burst = rate_fields(NO_DROP_RATE_MBPS, 1 << 20)
        vpcs = tuple(dataclasses.replace(v, rate_ns_per_mib=per_mib, burst_ns=burst)
                     for v in vpcs)
        flags |= L.CZ_CFG_RATES
    # the intent's defaults
    return dataclasses.replace(t, vpcs=vpcs, flags=flags, small_dscp=46, bulk_dscp=10,
                               elephant_bytes=10 << 20, flowlet_gap_ns=500_000,
                               flow_idle_ns=2_000_000_000, _index={})


def interleave(names: list[str], rounds: int) -> list[list[str]]:
    """The order of the settings in each round: rotated by one every round, so that no setting
    always runs first (after the harness's own work) or right after the same neighbour."""
    n = len(names)
    return [[names[(r + i) % n] for i in range(n)] for r in range(rounds)]


def paired_deltas(times: dict[str, list[float]]) -> dict[str, object]:
    """Medians, minima and the deltas against "off" of interleaved rounds.

    `policy_X_delta_ns` is the median over rounds of (X - off) within the same round: a round's
    two figures were taken seconds apart on the same CPU, so a slow drift of the box (another
    process, frequency, cache) cancels out, where the difference of the two medians keeps it
    when the slow rounds of one setting are not those of the other. The difference of the
    medians is reported beside it (`..._delta_of_medians_ns`)."""
    out: dict[str, object] = {}
    for name, ts in times.items():
        out[f"policy_{name}_ns_per_pkt"] = round(statistics.median(ts), 1)
        out[f"best_policy_{name}_ns_per_pkt"] = min(ts)
    off = times["off"]
    for name, ts in times.items():
        if name == "off":
            continue
        out[f"policy_{name}_delta_ns"] = round(
            statistics.median(x - o for x, o in zip(ts, off, strict=True)), 1)
        out[f"policy_{name}_delta_of_medians_ns"] = round(
            statistics.median(ts) - statistics.median(off), 1)
        out[f"best_policy_{name}_delta_ns"] = round(min(ts) - min(off), 1)
    out["policy_on_over_off"] = round(statistics.median(times["on"]) / statistics.median(off), 3)
    return out


def measure_policy(frame: bytes, progs: dict[str, Loaded], expected: Reason, repeat: int,
                   rounds: int) -> dict:
    """Interleaved rounds of the settings in progs ({"off": Loaded, "on": Loaded, ...}) on one
    frame, the order rotated every round; medians, minima, paired deltas against off, and the
    freshness check of every iteration."""
    times: dict[str, list[float]] = {name: [] for name in progs}
    before = {name: p.count(expected) for name, p in progs.items()}
    for order in interleave(list(progs), rounds):
        for name in order:
            times[name].append(progs[name].ns_per_pkt(frame, repeat))
    ok = all(p.count(expected) - before[name] == repeat * rounds
             for name, p in progs.items())
    out = paired_deltas(times)
    out["expected_reason"] = expected.label
    out["every_iteration_verified"] = ok
    return out


#: (label, object stem): the time sources, measured on the floor against the sum alone.
CLOCKS = (("sum_only", "bench_floor_sink"), ("ktime_get_ns", "bench_floor_clock"),
          ("ktime_get_coarse_ns", "bench_floor_coarse"), ("jiffies64", "bench_floor_jiffies"))


def clock_costs(load_floor: Callable[[str], Loaded], frame: bytes, repeat: int,
                rounds: int) -> dict:
    """Interleaved rounds of the floor with each time source: medians and each one's cost over
    the floor with the sum alone (ns per packet)."""
    progs = {label: load_floor(stem) for label, stem in CLOCKS}
    times: dict[str, list[float]] = {label: [] for label in progs}
    try:
        for order in interleave(list(progs), rounds):
            for label in order:
                times[label].append(progs[label].ns_per_pkt(frame, repeat))
    finally:
        for p in progs.values():
            p.close()
    base = statistics.median(times["sum_only"])
    out: dict[str, object] = {}
    for label, ts in times.items():
        out[f"floor_{label}_ns_per_pkt"] = round(statistics.median(ts), 1)
        if label != "sum_only":
            out[f"{label}_cost_ns"] = round(statistics.median(ts) - base, 1)
    return out


#: The scenarios `policy_scenarios` emits, in order.
POLICY_SCENARIOS = ("policy_ipv4_decap", "policy_ipv4_decap_spread", "policy_return_encap")


def policy_scenarios(load: Callable[[str, Tables, int], Loaded], tables: Tables,
                     frames: tuple[bytes, bytes, bytes], hosts: int, repeat: int, rounds: int,
                     emit: Callable[[dict], None], tag: dict) -> None:
    """The policy scenarios of one mode. load(obj_stem, tables, n_hosts) -> a programmed
    gateway; frames = (decap, decap spread, encap), hosts = how many the encap needs."""
    decap, spread, encap = frames
    for scenario, stem, frame, reason, n_hosts in (
        ("policy_ipv4_decap", "bench_gateway", decap, Reason.FWD_TO_STORAGE, 0),
        ("policy_ipv4_decap_spread", "bench_gateway_spread", spread, Reason.FWD_TO_STORAGE, 0),
        ("policy_return_encap", "bench_gateway", encap, Reason.FWD_TO_COMPUTE, hosts),
    ):
        progs = {"off": load(stem, tables, n_hosts),
                 "on": load(stem, with_policy(tables), n_hosts),
                 "on_with_rate": load(stem, with_policy(tables, rate=True), n_hosts)}
        if stem == "bench_gateway":
            progs["on_fixed_clock"] = load("bench_gateway_testclock", with_policy(tables),
                                           n_hosts)
        try:
            row = measure_policy(frame, progs, reason, repeat, rounds)
        finally:
            for p in progs.values():
                p.close()
        emit({"scenario": scenario, **tag, **row})
