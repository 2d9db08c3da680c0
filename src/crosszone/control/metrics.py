"""The controller's Prometheus metrics (`GET /metrics`), read from its state at scrape time:

    crosszone_desired_revision                     the intent revision the controller serves
    crosszone_gateway_revision{gateway}            the revision each gateway last reported
    crosszone_gateway_in_sync{gateway}             1 if it is at or after the desired one
    crosszone_gateway_health{gateway,health}       1 for the gateway's reported health
    crosszone_migration_step                       the migration's step (absent without one)
    crosszone_migration_weight_new_ratio           share of traffic on the new gateways, 0..1
                                                   (the record's weight_new is in percent)
    crosszone_migration_guard_ok{guard}            1 while a guard holds
    crosszone_metrics_skipped_samples_total        samples left out: their value is no number

Nothing is cached: a scrape sees what `/v1/status` and `/v1/migration` would answer. The
gateways' reports and the migration record come from the store, so any value may be odd: one
that is no finite-or-infinite float (a 401-digit `revision`, a string `step`) is left out and
counted, and the rest of the scrape goes on (an OverflowError would otherwise turn the whole
scrape into a 500).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from crosszone.control.dashboard import in_sync
from crosszone.store.store import StoreUnavailable


class ControllerCollector(Collector):
    """status() -> /v1/status document; migration() -> the migration record."""

    def __init__(self, status: Callable[[], dict[str, Any]],
                 migration: Callable[[], dict[str, Any]]) -> None:
        self.status, self.migration = status, migration
        self.skipped = 0  # samples left out since the start (scrapes may run concurrently)
        self._lock = threading.Lock()

    def _number(self, value: Any) -> float | None:
        """value as a sample, or None (and counted) when it is no number a float can hold."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an int beyond 1.8e308
                pass
        with self._lock:
            self.skipped += 1
        return None

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        """Yield the gauges (none when the store does not answer)."""
        try:
            st, mig = self.status(), self.migration()
        except StoreUnavailable:
            return
        want = st.get("desired_revision")
        desired = GaugeMetricFamily("crosszone_desired_revision",
                                    "Intent revision the controller serves")
        desired.add_metric([], float(want or 0))
        yield desired
        rev = GaugeMetricFamily("crosszone_gateway_revision",
                                "Revision each gateway last reported", labels=["gateway"])
        sync = GaugeMetricFamily("crosszone_gateway_in_sync",
                                 "1 if the gateway applied the desired revision (or later)",
                                 labels=["gateway"])
        health = GaugeMetricFamily("crosszone_gateway_health",
                                   "1 for the health the gateway reported",
                                   labels=["gateway", "health"])
        for gw, s in sorted(st.get("gateways", {}).items()):
            r = s.get("revision")
            if r is not None and (v := self._number(r)) is not None:
                rev.add_metric([gw], v)
            sync.add_metric([gw], 1.0 if in_sync(r, want) else 0.0)
            health.add_metric([gw, str(s.get("health", "unknown"))], 1.0)
        yield rev
        yield sync
        yield health
        yield from self._migration(mig)
        skipped = CounterMetricFamily("crosszone_metrics_skipped_samples",
                                      "Samples left out because their value is no number")
        skipped.add_metric([], float(self.skipped))
        yield skipped

    def _migration(self, mig: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
        if mig.get("state") in (None, "none", "unreadable"):
            return
        for name, key, scale, doc in (
                ("crosszone_migration_step", "step", 1, "Step of the migration"),
                # the record holds percent (migrate/engine.py); the metric is a ratio
                ("crosszone_migration_weight_new_ratio", "weight_new", 100,
                 "Share of traffic on the new gateways (0..1)")):
            if key in mig and (v := self._number(mig[key])) is not None:
                g = GaugeMetricFamily(name, doc)
                g.add_metric([], v / scale)
                yield g
        yield from _guards(mig)


def _guards(mig: dict[str, Any]) -> Iterator[GaugeMetricFamily]:
    raw = mig.get("guards")
    guards = [x for x in raw if isinstance(x, dict) and "name" in x] if isinstance(
        raw, list) else []
    if guards:
        ok = GaugeMetricFamily("crosszone_migration_guard_ok", "1 while a migration guard "
                               "holds", labels=["guard"])
        for guard in guards:
            ok.add_metric([str(guard["name"])], 1.0 if guard.get("ok") else 0.0)
        yield ok


def exposition(collector: ControllerCollector) -> bytes:
    """The text exposition of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
