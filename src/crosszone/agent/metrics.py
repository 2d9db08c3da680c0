"""Prometheus metrics of one agent (prometheus-client, conventional names and units).

The fast path's counters live in per-CPU BPF maps and only grow, so they are exported by a
collector that reads them at scrape time (no copy in Python goes stale):

    crosszone_vpc_packets_total{vpc,direction}   direction = to_storage | to_compute
    crosszone_vpc_bytes_total{vpc,direction}
    crosszone_verdicts_total{reason,verdict}     verdict = forward | pass | drop
    crosszone_verdict_bytes_total{reason,verdict}
    crosszone_table_entries{table}, crosszone_table_capacity_entries{table}
    crosszone_policy_marked_packets_total{vpc,class}   class = small | bulk (traffic policy)
    crosszone_policy_flowlet_moves_total{vpc}          bulk flows moved after an idle gap
    crosszone_policy_rate_dropped_packets_total{vpc}   over the VPC's rate (reason drop_vpc_rate)
    crosszone_policy_rate_dropped_bytes_total{vpc}

The agent's own state is ordinary metrics: applied revision, reconcile latency (histogram,
seconds), rejected revisions, store reachability, and the fast path's watchdog:
crosszone_fastpath_own_program{interface} (0/1), crosszone_fail_closed_total and
crosszone_fail_closed_recoveries_total.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from crosszone.abi import layout
from crosszone.abi.reasons import Reason

#: Prometheus recording rules over these metrics (per-gateway and per-VPC rates, verdicts by
#: reason); the emulator's Prometheus loads them, the dashboard and Grafana read their names.
RECORDING_RULES = Path(__file__).with_name("recording_rules.yml")

CAPACITY = {"routes4": layout.CZ_MAX_ROUTES4, "routes6": layout.CZ_MAX_ROUTES6,
            "hosts": layout.CZ_MAX_HOSTS, "vtep_allowed": layout.CZ_MAX_VTEPS,
            "vpc_by_vni": layout.CZ_MAX_VPCS, "sf4": layout.CZ_MAX_SF, "sf6": layout.CZ_MAX_SF}


class FastPathCollector(Collector):
    """Reads the gateway's counters on every scrape.

    vpc_counters() -> {vpc name: (to_storage pkts, bytes, to_compute pkts, bytes)};
    reason_counters() -> {Reason: (pkts, bytes)}; occupancy() -> {table: entries}."""

    def __init__(self, vpc_counters: Callable[[], dict[str, tuple[int, int, int, int]]],
                 reason_counters: Callable[[], dict[Reason, tuple[int, int]]],
                 occupancy: Callable[[], dict[str, int]],
                 policy_counters: Callable[[], dict[str, Any]] | None = None) -> None:
        self.vpc_counters = vpc_counters
        self.reason_counters = reason_counters
        self.occupancy = occupancy
        # {vpc name: layout.CzPolicyCounter} (None: the fast path has no policy counters)
        self.policy_counters = policy_counters

    def collect(self) -> Iterator[Any]:
        """Yield the metric families."""
        pk = CounterMetricFamily("crosszone_vpc_packets", "Packets forwarded per VPC",
                                 labels=["vpc", "direction"])
        by = CounterMetricFamily("crosszone_vpc_bytes", "Bytes forwarded per VPC",
                                 labels=["vpc", "direction"])
        try:
            vpcs = self.vpc_counters()
            reasons = self.reason_counters()
            occ = self.occupancy()
        except OSError:
            return  # maps gone (gateway detached): export nothing rather than stale numbers
        for vpc, (sp, sb, cp, cb) in sorted(vpcs.items()):
            pk.add_metric([vpc, "to_storage"], sp)
            pk.add_metric([vpc, "to_compute"], cp)
            by.add_metric([vpc, "to_storage"], sb)
            by.add_metric([vpc, "to_compute"], cb)
        yield pk
        yield by
        vp = CounterMetricFamily("crosszone_verdicts", "Fast-path verdicts by reason",
                                 labels=["reason", "verdict"])
        vb = CounterMetricFamily("crosszone_verdict_bytes", "Bytes per verdict reason",
                                 labels=["reason", "verdict"])
        for r, (p, b) in sorted(reasons.items()):
            vp.add_metric([r.label, r.verdict_class], p)
            vb.add_metric([r.label, r.verdict_class], b)
        yield vp
        yield vb
        te = GaugeMetricFamily("crosszone_table_entries", "Entries in a fast-path table",
                               labels=["table"])
        tc = GaugeMetricFamily("crosszone_table_capacity_entries", "Capacity of a table",
                               labels=["table"])
        for t, n in sorted(occ.items()):
            te.add_metric([t], n)
            if t in CAPACITY:
                tc.add_metric([t], CAPACITY[t])
        yield te
        yield tc
        if self.policy_counters is not None:
            try:
                yield from _policy_families(self.policy_counters())
            except OSError:
                return


def _policy_families(per_vpc: dict[str, Any]) -> Iterator[CounterMetricFamily]:
    """The traffic policy's counters ({vpc: CzPolicyCounter}) as metric families."""
    marked = CounterMetricFamily("crosszone_policy_marked_packets",
                                 "Packets marked by the traffic policy", labels=["vpc", "class"])
    moves = CounterMetricFamily("crosszone_policy_flowlet_moves",
                                "Bulk flows moved to another path after an idle gap",
                                labels=["vpc"])
    dropped = CounterMetricFamily("crosszone_policy_rate_dropped_packets",
                                  "Packets over the VPC's rate", labels=["vpc"])
    dropped_b = CounterMetricFamily("crosszone_policy_rate_dropped_bytes",
                                    "Inner IP bytes over the VPC's rate", labels=["vpc"])
    marked_b = CounterMetricFamily("crosszone_policy_marked_bytes",
                                   "Inner IP bytes marked by the traffic policy, per class",
                                   labels=["vpc", "class"])
    bare = CounterMetricFamily("crosszone_policy_bare_packets",
                               "TCP segments without payload (SYN, ACK, FIN, RST), marked small "
                               "without flow state", labels=["vpc"])
    for vpc, c in sorted(per_vpc.items()):
        marked.add_metric([vpc, "small"], c.small_packets)
        marked.add_metric([vpc, "bulk"], c.bulk_packets)
        marked_b.add_metric([vpc, "small"], c.small_bytes)
        marked_b.add_metric([vpc, "bulk"], c.bulk_bytes)
        bare.add_metric([vpc], c.bare_packets)
        moves.add_metric([vpc], c.flowlet_moves)
        dropped.add_metric([vpc], c.rate_drop_packets)
        dropped_b.add_metric([vpc], c.rate_drop_bytes)
    yield from (marked, marked_b, bare, moves, dropped, dropped_b)


class AgentMetrics:
    """The agent's own metrics, in a registry of their own (one agent per process or test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.applied_revision = Gauge("crosszone_applied_revision",
                                      "Last store revision applied to the maps", registry=r)
        self.reconcile_seconds = Histogram(
            "crosszone_reconcile_seconds", "Time to apply one revision to the maps",
            ["mode"], registry=r,
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5, 10, 30))
        self.entries_written = Counter("crosszone_map_entries_written",
                                       "Map entries put or deleted", ["kind"], registry=r)
        self.rejected = Counter("crosszone_rejected_revisions",
                                "Revisions that did not validate (last good state kept)",
                                registry=r)
        self.rejected_by_stage = Counter(
            "crosszone_rejected_revisions_by_stage",
            "Rejected revisions by where they failed: validate (decode, check, compile), apply "
            "(a map write, undone), internal (an unforeseen error)", ["stage"], registry=r)
        self.resyncs = Counter("crosszone_store_resyncs",
                               "Full re-reads because the store compacted the revisions after "
                               "the last one seen", registry=r)
        self.store_up = Gauge("crosszone_store_up", "1 if the store answered the last call",
                              registry=r)
        self.store_errors = Counter("crosszone_store_errors", "Failed store calls", registry=r)
        # the fast path's watchdog (fastpath_guard): a gray failure fails closed
        self.fastpath_attached = Gauge(
            "crosszone_fastpath_own_program", "1 if the interface runs the XDP program the agent "
            "loaded (checked every 20 ms)", ["interface"], registry=r)
        self.fail_closed = Counter(
            "crosszone_fail_closed", "Times the gateway failed closed: a port lost the fast "
            "path, the gateway was taken out of routing", registry=r)
        self.fail_closed_recoveries = Counter(
            "crosszone_fail_closed_recoveries", "Times the expected program was back on every "
            "port and the gateway was announced again", registry=r)

    def add_fastpath(self, collector: FastPathCollector) -> None:
        """Export the fast path's counters too."""
        self.registry.register(collector)
