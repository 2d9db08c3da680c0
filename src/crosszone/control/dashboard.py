"""What the dashboard and `crosszone top` show, gathered in one JSON document by the controller.

The browser asks only the controller (`GET /v1/dashboard`, polled every 2 s): the controller
reads the gateways' reports and the migration record from the store, and the rates from
Prometheus, through the recording rules of `agent/recording_rules.yml`. Series come back on one
time axis (start, step, one value or null per step), the form uPlot draws without work.

Without a Prometheus URL (or while it does not answer, or answers something that is not the
HTTP API's document) the document still carries the gateways and the migration, and says why
the rates are missing. Prometheus is asked once per window and step however many dashboards
poll: the answers are shared (`SharedAnswers`) until the step moves on.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from crosszone.store.store import Store

MIGRATION_KEY = "migration/state"
#: the recording rules the dashboard draws (agent/recording_rules.yml)
SERIES = {
    "vpc_bits": ("crosszone:vpc_bits:rate5s", ("vpc", "direction")),
    "vpc_packets": ("crosszone:vpc_packets:rate5s", ("vpc", "direction")),
    "gateway_bits": ("crosszone:gateway_bits:rate5s", ("gateway", "direction")),
    "verdicts": ("crosszone:verdicts:rate5s", ("verdict", "reason")),
    # the traffic policy per class (small | bulk) and its per-VPC rate drops
    "class_bits": ("crosszone:class_bits:rate5s", ("vpc", "class")),
    "class_packets": ("crosszone:class_packets:rate5s", ("vpc", "class")),
    "rate_drops": ("crosszone:rate_drops:rate5s", ("vpc",)),
    # the shaped queues per port group and class (small | default | bulk), where something
    # exports crosszone_queue_* (the emulator's queue exporter, a switch): none otherwise
    "queue_bits": ("crosszone:queue_bits:rate10s", ("group", "class")),
    "queue_drops": ("crosszone:queue_drops:rate10s", ("group", "class")),
    "queue_backlog": ("crosszone:queue_backlog_bytes:sum", ("group", "class")),
}
#: the agents' gauges of routing and attachment (agent/routing.py), read as instant vectors
GAUGES = {
    "bgp": "crosszone_bgp_session_up",
    "bfd": "crosszone_bfd_session_up",
    "attached": "crosszone_fastpath_attached",
    "scrape": 'up{role="agent"}',
}
MAX_WINDOW = 3600


class PrometheusError(RuntimeError):
    """Prometheus cannot be reached or refused a query."""


class PrometheusReader:
    """Instant and range queries against one Prometheus server (HTTP API v1)."""

    def __init__(self, url: str, timeout: float = 2.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, timeout=timeout)

    def _get(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            r = self._http.get(path, params=params)
            body = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise PrometheusError(f"prometheus {self.url}: {exc}") from None
        if not isinstance(body, dict):
            raise PrometheusError(f"prometheus {self.url}: answered a JSON "
                                  f"{type(body).__name__}, not an object")
        if r.status_code != 200 or body.get("status") != "success":
            raise PrometheusError(f"prometheus {self.url}: {body.get('error', r.status_code)}")
        data = body.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list) or not all(
                isinstance(x, dict) and isinstance(x.get("metric"), dict) for x in result):
            raise PrometheusError(f"prometheus {self.url}: a success without data.result as "
                                  "a list of series")
        return result

    def instant(self, expr: str) -> list[dict[str, Any]]:
        """[{"metric": labels, "value": [t, "v"]}, ...]."""
        return self._get("/api/v1/query", {"query": expr})

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """[{"metric": labels, "values": [[t, "v"], ...]}, ...]."""
        return self._get("/api/v1/query_range", {"query": expr, "start": start, "end": end,
                                                  "step": step})


def _float(x: Any) -> float:
    """A sample's time or value (Prometheus sends numbers and numbers as strings)."""
    if isinstance(x, bool) or not isinstance(x, str | int | float):
        raise PrometheusError(f"prometheus: {str(x)[:40]!r} is not a number")
    try:
        return float(x)
    except (ValueError, OverflowError):
        raise PrometheusError(f"prometheus: {str(x)[:40]!r} is not a number") from None


def _number(text: Any) -> float | None:
    v = _float(text)
    return None if math.isnan(v) or math.isinf(v) else v


def _pairs(res: dict[str, Any], key: str) -> list[Any]:
    pairs = res.get(key, [])
    if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2
                                              for p in pairs):
        raise PrometheusError(f"prometheus: {key} is not a list of [time, value] pairs")
    return pairs


def align(results: list[dict[str, Any]], labels: tuple[str, ...], start: float, step: float,
          points: int) -> list[dict[str, Any]]:
    """Range results on one axis: each series' labels and a value (or None) per step
    (PrometheusError for a sample whose time or value is no number)."""
    out = []
    for res in results:
        values: list[float | None] = [None] * points
        for t, v in _pairs(res, "values"):
            at = (_float(t) - start) / step
            if not math.isfinite(at):
                raise PrometheusError(f"prometheus: sample time {str(t)[:40]!r} is no time")
            i = round(at)
            if 0 <= i < points:
                values[i] = _number(v)
        out.append({**{k: str(res["metric"].get(k, "")) for k in labels}, "values": values})
    return sorted(out, key=lambda s: [s[k] for k in labels])


def in_sync(applied: Any, desired: Any) -> bool:
    """Whether a gateway runs the desired intent. An agent reports the store revision it has
    read up to, which other writes (status reports, the migration record) move past the
    intent's own revision: at or after it is in sync."""
    return isinstance(applied, int) and isinstance(desired, int) and applied >= desired


def active(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The series with a rate above zero somewhere in the window (a reason that never fired
    is not worth a line or a row)."""
    return [s for s in series if any(v for v in s["values"] if v is not None)]


def _gauges(results: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, float]]]:
    """gauge -> gateway -> {peer/device: value}, from each gauge's instant vector."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name, vector in results.items():
        per: dict[str, dict[str, float]] = {}
        for res in vector:
            m = res["metric"]
            key = str(m.get("peer") or m.get("device") or "agent")
            value = res.get("value")
            if not isinstance(value, list) or len(value) != 2:
                raise PrometheusError("prometheus: value is not a [time, value] pair")
            per.setdefault(str(m.get("gateway", "")), {})[key] = _float(value[1])
        out[name] = per
    return out


def _ask(prom: PrometheusReader, start: float, end: float, step: float
         ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """Every range and instant query of one snapshot, all at once: on a loaded machine each
    takes up to a second, and asked one after the other they made the page lag by several."""
    with ThreadPoolExecutor(max_workers=len(SERIES) + len(GAUGES)) as pool:
        ranges = {k: pool.submit(prom.range, expr, start, end, step)
                  for k, (expr, _labels) in SERIES.items()}
        instants = {k: pool.submit(prom.instant, expr) for k, expr in GAUGES.items()}
        return ({k: f.result() for k, f in ranges.items()},
                {k: f.result() for k, f in instants.items()})


class SharedAnswers:
    """Prometheus's answers for one (window, step), shared by every snapshot asking within the
    same step: twenty open dashboards cost one set of queries per step, not twenty (each set
    is one query per series and gauge). The first asker queries; the others wait for its
    answers (or its error, shared too: a Prometheus that is down is not asked again until the
    next step). Answers
    for an earlier step are dropped when a later one is asked; at most `keep` are held."""

    def __init__(self, keep: int = 16) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._answers: dict[tuple[float, float, float], Future] = {}

    def get(self, prom: PrometheusReader, start: float, end: float, step: float
            ) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
        """The answers of _ask for this window, asked at most once per step."""
        key = (start, end, step)
        with self._lock:
            future = self._answers.get(key)
            mine = future is None
            if future is None:
                future = self._answers[key] = Future()
                for old in [k for k in self._answers if k[1] < end]:
                    del self._answers[old]
                while len(self._answers) > self.keep:  # the oldest asked go first
                    del self._answers[next(iter(self._answers))]
        if mine:
            try:
                future.set_result(_ask(prom, start, end, step))
            except Exception as exc:  # given to every waiter (else they would wait forever)
                future.set_exception(exc)
        return future.result()


def _sessions(values: dict[str, float]) -> dict[str, Any]:
    return {"up": sum(v == 1 for v in values.values()), "total": len(values),
            "peers": {k: v == 1 for k, v in sorted(values.items())}}


def gateways(status: dict[str, Any], gauges: dict[str, dict[str, dict[str, float]]] | None
             ) -> list[dict[str, Any]]:
    """One row per gateway: its report and, when Prometheus answered, its sessions and
    attachment (None where nothing is known)."""
    want = status.get("desired_revision")
    rows = []
    for name, s in sorted(status.get("gateways", {}).items()):
        row: dict[str, Any] = {"name": name, "health": s.get("health", "unknown"),
                               "revision": s.get("revision"),
                               "in_sync": in_sync(s.get("revision"), want),
                               "message": s.get("message", "") or "",
                               "bgp": None, "bfd": None, "attached": None, "scraped": None}
        if gauges is not None:
            for key in ("bgp", "bfd"):
                if name in gauges[key]:
                    row[key] = _sessions(gauges[key][name])
            if name in gauges["attached"]:
                row["attached"] = {d: v == 1 for d, v in sorted(gauges["attached"][name].items())}
            if name in gauges["scrape"]:
                row["scraped"] = gauges["scrape"][name].get("agent") == 1
        rows.append(row)
    return rows


def migration(store: Store) -> dict[str, Any]:
    """The migration record (`migration/state`), or {"state": "none"} when there is none."""
    raw = store.get(MIGRATION_KEY)
    if raw is None:
        return {"state": "none"}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {"state": "unreadable"}
    return value if isinstance(value, dict) else {"state": "unreadable"}


def weight_share(record: dict[str, Any]) -> float | None:
    """The share of traffic on the new gateways, 0..1, from a migration record's `weight_new`,
    which the engine writes in percent (0..100, migrate/engine.py); None when it is absent or
    no number. Every reader converts here: the metric, `top` and (in the same unit) the page."""
    w = record.get("weight_new")
    if not isinstance(w, int | float) or isinstance(w, bool):
        return None
    try:
        share = float(w) / 100
    except OverflowError:
        return None
    return share if math.isfinite(share) else None


def chart_file(path: Path) -> bool:
    """Whether path is a chart the dashboard may serve: a regular file in the directory itself,
    not a symbolic link (which could point anywhere on the controller's host)."""
    return path.suffix == ".svg" and not path.is_symlink() and path.is_file()


def charts(directory: Path | None) -> list[str]:
    """The SVG charts (plan, simulate) in the charts directory, by name."""
    if directory is None or not directory.is_dir():
        return []
    return sorted(p.name for p in directory.glob("*.svg") if chart_file(p))


def snapshot(status: dict[str, Any], store: Store, prom: PrometheusReader | None,
             charts_dir: Path | None, window: float = 300, step: float = 2,
             now: Callable[[], float] = time.time,
             shared: SharedAnswers | None = None) -> dict[str, Any]:
    """Everything the dashboard shows, as of now (shared: Prometheus answers shared between
    snapshots, else asked for this one)."""
    if not (math.isfinite(window) and math.isfinite(step) and step > 0):
        raise ValueError(f"window {window} and step {step} must be finite seconds, step > 0")
    window = min(max(window, 10 * step), MAX_WINDOW)
    end = math.floor(now() / step) * step
    start = end - window
    points = int(window / step) + 1
    doc: dict[str, Any] = {
        "time": end, "desired_revision": status.get("desired_revision"),
        "prometheus": {"url": prom.url if prom else None, "ok": False, "error": None},
        "series": {"start": start, "step": step, "points": points},
        "migration": migration(store), "charts": charts(charts_dir)}
    gauges = None
    if prom is None:
        doc["prometheus"]["error"] = "no Prometheus configured (crosszone controller --prometheus)"
    else:
        try:
            ranges, instants = (shared.get(prom, start, end, step) if shared is not None
                                else _ask(prom, start, end, step))
            series = {key: align(ranges[key], labels, start, step, points)
                      for key, (_expr, labels) in SERIES.items()}
            series["verdicts"] = active(series["verdicts"])
            gauges = _gauges(instants)
            doc["series"].update(series)  # all or nothing: no half-read answer is shown
            doc["prometheus"]["ok"] = True
        except PrometheusError as exc:
            doc["prometheus"]["error"] = str(exc)
    for key in SERIES:
        doc["series"].setdefault(key, [])
    doc["gateways"] = gateways(status, gauges)
    return doc


def latest(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each series' labels and its last known value (None when it has none)."""
    out = []
    for s in series:
        known = [v for v in s["values"] if v is not None]
        out.append({**{k: v for k, v in s.items() if k != "values"},
                    "value": known[-1] if known else None})
    return out
