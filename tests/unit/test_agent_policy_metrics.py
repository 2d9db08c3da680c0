"""The agent exports the traffic policy's per-VPC counters (marks and bytes per class, bare
segments, flowlet moves, rate drops)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from crosszone.abi import layout
from crosszone.agent.metrics import FastPathCollector


def test_policy_counters_are_exported_per_vpc_and_class():
    a = layout.CzPolicyCounter(small_packets=5, bulk_packets=7, flowlet_moves=2,
                               rate_drop_packets=3, rate_drop_bytes=4500, small_bytes=640,
                               bulk_bytes=10500, bare_packets=4)
    reg = CollectorRegistry()
    reg.register(FastPathCollector(lambda: {}, lambda: {}, lambda: {},
                                   lambda: {"tenant-a": a, "tenant-b": layout.CzPolicyCounter()}))
    text = generate_latest(reg).decode()
    for needle in ('crosszone_policy_marked_packets_total{class="small",vpc="tenant-a"} 5.0',
                   'crosszone_policy_marked_packets_total{class="bulk",vpc="tenant-a"} 7.0',
                   'crosszone_policy_flowlet_moves_total{vpc="tenant-a"} 2.0',
                   'crosszone_policy_rate_dropped_packets_total{vpc="tenant-a"} 3.0',
                   'crosszone_policy_rate_dropped_bytes_total{vpc="tenant-a"} 4500.0',
                   'crosszone_policy_rate_dropped_packets_total{vpc="tenant-b"} 0.0',
                   'crosszone_policy_marked_bytes_total{class="small",vpc="tenant-a"} 640.0',
                   'crosszone_policy_marked_bytes_total{class="bulk",vpc="tenant-a"} 10500.0',
                   'crosszone_policy_bare_packets_total{vpc="tenant-a"} 4.0',
                   'crosszone_policy_marked_bytes_total{class="bulk",vpc="tenant-b"} 0.0'):
        assert needle in text, needle


def test_without_policy_counters_nothing_of_the_policy_is_exported():
    reg = CollectorRegistry()
    reg.register(FastPathCollector(lambda: {}, lambda: {}, lambda: {}))
    assert "crosszone_policy" not in generate_latest(reg).decode()


def test_maps_gone_exports_no_policy_family():
    def gone() -> dict:
        raise OSError("detached")

    reg = CollectorRegistry()
    reg.register(FastPathCollector(lambda: {}, lambda: {}, lambda: {}, gone))
    assert "crosszone_policy" not in generate_latest(reg).decode()
