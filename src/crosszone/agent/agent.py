"""The per-gateway agent: attach the fast path if needed, watch the store, apply diffs, report.

Restart safety: the maps are pinned under the pin directory, so the fast path forwards while no
agent runs. A (re)started agent opens the pins, reads what the maps hold, and applies only the
difference to the desired state: an unchanged intent writes nothing. Stable ids and the last
applied revision are kept in `<pin_dir>/agent-<gateway>.json`.

Store unreachable: the maps keep the last applied state; the agent retries with exponential
backoff (time is injected: `now`, `sleep`), reports `store_up 0` and `health: degraded`.
"""

from __future__ import annotations

import json
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from crosszone.agent.desired import Ids
from crosszone.agent.metrics import AgentMetrics, FastPathCollector
from crosszone.agent.reconcile import Applied, Reconciler
from crosszone.compile.diff import Sink
from crosszone.control.store import INTENT, STATUS, Store, StoreUnavailable
from crosszone.fastpath.reasons import Reason


@dataclass
class Backoff:
    """Exponential backoff: initial, doubling, capped; reset after a success."""

    initial: float = 0.05
    cap: float = 5.0
    current: float = field(default=0.0, init=False)

    def next(self) -> float:
        """The next delay."""
        self.current = self.initial if self.current == 0 else min(self.cap, self.current * 2)
        return self.current

    def reset(self) -> None:
        """Back to the initial delay."""
        self.current = 0.0


class Agent:
    """One gateway's reconcile loop over a store and a sink."""

    def __init__(self, gateway: str, store: Store, sink: Sink,
                 ifindex_of: Callable[[str], int], state_file: Path | None = None,
                 read_actual: Callable[[Any], Any] | None = None,
                 metrics: AgentMetrics | None = None,
                 now: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 status_every: float = 1.0) -> None:
        self.gateway = gateway
        self.store = store
        self.state_file = state_file
        self.read_actual = read_actual
        self.metrics = metrics or AgentMetrics()
        self.now, self.sleep = now, sleep
        self.backoff = Backoff()
        self.status_every = status_every
        self._last_status = -1e18
        self.health = "starting"
        self.message = ""
        self.counters: Callable[[], dict[str, int]] = lambda: {}
        self.occupancy: Callable[[], dict[str, int]] = lambda: {}
        ids = None
        if state_file is not None and state_file.exists():
            try:
                ids = Ids.from_json(json.dumps(json.loads(state_file.read_text())["ids"]))
            except (ValueError, KeyError):
                ids = None  # a damaged state file: ids are re-derived, entries rewritten
        self.rec = Reconciler(gateway, sink, ifindex_of, ids=ids, now=now)
        self.started = False

    def _record(self, res: Applied) -> None:
        m = self.metrics
        m.reconcile_seconds.labels(res.mode).observe(res.seconds)
        m.entries_written.labels("put").inc(res.puts)
        m.entries_written.labels("delete").inc(res.deletes)
        if res.mode == "rejected":
            m.rejected.inc()
            self.health, self.message = "rejecting", self.rec.last_error or ""
        else:
            m.applied_revision.set(self.rec.revision)
            self.health, self.message = "ok", ""
            if self.state_file is not None and self.rec.ids is not None:
                tmp = self.state_file.with_suffix(".tmp")
                tmp.write_text(json.dumps({"revision": self.rec.revision,
                                           "ids": json.loads(self.rec.ids.to_json())}))
                tmp.replace(self.state_file)

    def _store_failed(self, exc: Exception) -> None:
        self.metrics.store_up.set(0)
        self.metrics.store_errors.inc()
        self.health = "degraded"
        self.message = f"store unreachable, keeping revision {self.rec.revision}: {exc}"
        self.sleep(self.backoff.next())

    def start(self) -> Applied | None:
        """Read the whole desired state once and reconcile the maps to it."""
        try:
            objs, rev = self.store.get_prefix(INTENT)
        except StoreUnavailable as exc:
            self._store_failed(exc)
            return None
        self.metrics.store_up.set(1)
        self.backoff.reset()
        objects = {k[len(INTENT):]: v for k, v in objs.items()}
        if not objects:
            self.rec.revision = rev
            self.started = True
            self.health, self.message = "waiting", "no intent in the store yet"
            return None
        res = self.rec.load(objects, rev, actual=self.read_actual)
        self.rec.revision = max(self.rec.revision, rev)
        self.started = True
        self._record(res)
        return res

    def step(self, timeout: float = 1.0) -> Applied | None:
        """Wait up to timeout for new revisions and apply them; report status when due."""
        if not self.started:
            res = self.start()
            self.report()
            return res
        try:
            events = self.store.watch(INTENT, self.rec.revision, timeout)
        except StoreUnavailable as exc:
            self._store_failed(exc)
            return None
        self.metrics.store_up.set(1)
        self.backoff.reset()
        from crosszone.control.store import Event

        res = self.rec.on_events([Event(e.revision, e.key[len(INTENT):], e.value)
                                  for e in events])
        if res is not None:
            self._record(res)
        self.report(force=res is not None)
        return res

    def status(self) -> dict[str, Any]:
        """This agent's report."""
        out: dict[str, Any] = {"revision": self.rec.revision, "health": self.health,
                               "message": self.message, "rejected": self.rec.rejected,
                               "updated": time.time()}
        try:
            out["counters"] = self.counters()
            out["occupancy"] = self.occupancy()
        except OSError as exc:
            out["counters"], out["message"] = {}, f"counters unreadable: {exc}"
        return out

    def report(self, force: bool = False) -> None:
        """Write the status to the store (at most every status_every seconds unless forced)."""
        if not force and self.now() - self._last_status < self.status_every:
            return
        try:
            self.store.put(STATUS + self.gateway, json.dumps(self.status()).encode())
            self._last_status = self.now()
        except StoreUnavailable:
            pass  # reported by the next watch failure

    def run(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Loop until should_stop()."""
        while not should_stop():
            self.step()


def fastpath_hooks(agent: Agent, maps: Any) -> None:
    """Wire the agent's counters, occupancy and metrics to a gateway's pinned maps."""
    def vpc_counters() -> dict[str, tuple[int, int, int, int]]:
        out = {}
        for name, vid in (agent.rec.ids.vpcs.items() if agent.rec.ids else []):
            c = maps.vpc_stats(vid)
            out[name] = (c.to_storage_packets, c.to_storage_bytes, c.to_compute_packets,
                         c.to_compute_bytes)
        return out

    def occupancy() -> dict[str, int]:
        return {k: len(v) for k, v in agent.rec.entries.items()}

    def counters() -> dict[str, int]:
        stats = maps.reason_stats()
        out = {"forwarded": 0, "passed": 0, "dropped": 0}
        key = {"forward": "forwarded", "pass": "passed", "drop": "dropped"}
        for r, (p, _b) in stats.items():
            out[key[Reason(r).verdict_class]] += p
        return out

    agent.counters, agent.occupancy = counters, occupancy
    agent.metrics.add_fastpath(FastPathCollector(vpc_counters, maps.reason_stats, occupancy))


def ensure_attached(store: Store, gateway: str, pin_dir: Path, netns: str | None,
                    sleep: Callable[[float], None] = time.sleep) -> None:
    """Load and attach the fast path unless it is pinned already (waits for an intent)."""
    from crosszone.control.objects import join_objects
    from crosszone.fastpath import deploy
    from crosszone.intent.cluster import for_gateway

    if (pin_dir / "maps").is_dir() and (pin_dir / "prog").exists():
        return
    backoff = Backoff()
    while True:
        try:
            objs, _ = store.get_prefix(INTENT)
            if objs:
                break
        except StoreUnavailable:
            pass
        sleep(backoff.next())
    cluster = join_objects({k[len(INTENT):]: v for k, v in objs.items()})
    # attach programs what its intent file says; give it the core only (no pool routes):
    # the first reconcile writes the rest in bulk.
    core = for_gateway(cluster, gateway, core=True)
    doc = core.model_dump(mode="json")
    for k, p in enumerate(doc["storage_pools"]):
        # Version 1 needs one prefix per pool; the first reconcile deletes these placeholders.
        p["prefixes"] = [f"240.0.{k // 256}.{k % 256}/32"]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(doc, fh)
    deploy.attach(fh.name, pin_dir, netns)
    Path(fh.name).unlink()


def ifindex_in(netns: str | None) -> Callable[[str], int]:
    """if_nametoindex inside a namespace."""
    from crosszone.fastpath.netns import in_netns

    def look(name: str) -> int:
        with in_netns(netns):
            return socket.if_nametoindex(name)
    return look
