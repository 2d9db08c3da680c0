"""The reconcile step: store objects and events in, ordered map operations out to a sink.

`Reconciler` holds what the gateway's maps hold (`entries`), the objects of the last applied
revision and their cluster. Two ways forward:

- `load(objects, revision)`: compile the whole cluster for this gateway and diff against the
  entries (after a restart those are read from the pinned maps, so an unchanged intent writes
  nothing and traffic never notices the restart);
- `on_events(events)`: when only pool prefix chunks changed, diff those chunks (a one-route change
  touches one route entry and maybe a VPC entry); anything else falls back to `load`.

A revision that does not validate is rejected: the maps keep the last good state, and the
rejection is counted and reported. Any error counts: a malformed object (decoding raises only
InvalidIntentError), a gateway missing from the intent, an exception while compiling, or a map
write that fails. A failed write is undone (the keys it touched get their old values back) so the
maps hold the last good revision again; if even the undo fails, `suspect` is set and the agent
re-reads the maps before the next revision. Revisions are applied in order; `revision` is the
last one applied.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from crosszone.compile.diff import (
    ARRAY_MAPS,
    MAP_ORDER,
    Entries,
    MapOp,
    Sink,
    apply_to,
    count,
    diff_entries,
)
from crosszone.compile.encode import Records
from crosszone.compile.gateway import Desired, Ids, compile_gateway, route_delta
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.prefixes import PrefixSet
from crosszone.intent.schema import Cluster
from crosszone.store.objects import POOL, concat, join_objects, parse_chunk
from crosszone.store.store import Event


@dataclass(frozen=True)
class Applied:
    """What one reconcile step did."""

    revision: int
    mode: str              # "full", "delta", "rejected", "noop"
    puts: int
    deletes: int
    seconds: float
    error: str | None = None
    stage: str | None = None   # of a rejection: "validate" (decode, check, compile) or "apply"


def _minus(a: PrefixSet, b: PrefixSet) -> PrefixSet:
    """Prefixes of a that are not in b."""
    m4 = ~np.isin(a.keys4(), b.keys4())
    six_b = set(zip(b.hi6.tolist(), b.lo6.tolist(), b.plen6.tolist()))
    m6 = np.array([t not in six_b for t in zip(a.hi6.tolist(), a.lo6.tolist(),
                                               a.plen6.tolist())], bool)
    return PrefixSet(a.addr4[m4], a.plen4[m4], a.hi6[m6] if len(m6) else a.hi6,
                     a.lo6[m6] if len(m6) else a.lo6, a.plen6[m6] if len(m6) else a.plen6)


class Reconciler:
    """Keeps one gateway's maps equal to the store's desired state."""

    def __init__(self, gateway: str, sink: Sink, ifindex_of: Callable[[str], int],
                 entries: Entries | None = None, ids: Ids | None = None,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.gateway = gateway
        self.sink = sink
        self.ifindex_of = ifindex_of
        self.entries: Entries = entries if entries is not None else {}
        self.ids = ids
        self.now = now
        self.objects: dict[str, bytes] = {}
        self.chunks: dict[str, PrefixSet] = {}
        self._cluster: Cluster | None = None
        self._stale: set[str] = set()  # pools whose prefixes in _cluster predate a delta
        self.desired: Desired | None = None
        self.revision = 0
        # The last revision looked at, applied or rejected, and the objects as of it: the agent
        # watches after `seen`, so a rejected revision is judged once, not on every step, and
        # the next events apply on top of it (they may be what repairs it).
        self.seen = 0
        self.latest: dict[str, bytes] = {}
        self.rejected = 0
        self.last_error: str | None = None
        # The maps may not hold `entries` (a failed write could not be undone): re-read them.
        self.suspect = False

    def _apply(self, ops: list[MapOp], track: bool = True) -> None:
        """Perform ops; track=False when the caller replaces the entries afterwards (a full
        reconcile: replaying a million puts into a dict is seconds of nothing).

        A failing op raises _ApplyFailed after the ops done so far (and the failing one, which
        may be half done) are undone: with track=False `entries` still is the pre-image; with
        track=True the old values of the keys an op touches are kept before it runs."""
        before: dict[tuple[str, bytes], bytes | None] = {}
        done: list[MapOp] = []
        try:
            for op in ops:
                if track:
                    m = self.entries.get(op.map, {})
                    for k in op.keys:
                        before.setdefault((op.map, bytes(k)), m.get(bytes(k)))
                done.append(op)
                self.sink.apply(op)
                if track:
                    for _ in apply_to(self.entries, [op]):
                        pass
        except Exception as exc:
            if not track:
                for op in done:
                    m = self.entries.get(op.map, {})
                    for k in op.keys:
                        before.setdefault((op.map, bytes(k)), m.get(bytes(k)))
            self._undo(before)
            raise _ApplyFailed(exc) from exc

    def _undo(self, before: dict[tuple[str, bytes], bytes | None]) -> None:
        """Give the touched keys their old values back, in the diff's order; puts first, as
        they are idempotent, then deletes one by one (the failed batch may not have created
        them: a missing key is not an error here)."""
        old: Entries = {}
        for (name, k), v in before.items():
            if v is not None:
                old.setdefault(name, {})[k] = v
            elif name in self.entries:
                self.entries[name].pop(k, None)
        for name, m in old.items():
            self.entries.setdefault(name, {}).update(m)
        puts = [MapOp("put", name, list(put), list(put.values())) for name in MAP_ORDER
                if (put := old.get(name))]
        dels = [MapOp("delete", name, [k]) for name in reversed(MAP_ORDER)
                if name not in ARRAY_MAPS
                for (n, k), v in before.items() if n == name and v is None]
        for op in puts + dels:
            try:
                self.sink.apply(op)
            except Exception:  # best effort; the agent re-reads the maps
                if op.kind == "put":
                    self.suspect = True

    def _reject(self, revision: int, exc: Exception, t0: float, stage: str = "validate"
                ) -> Applied:
        self.rejected += 1
        self.last_error = (f"revision {revision} rejected ({stage}), keeping revision "
                           f"{self.revision}: {type(exc).__name__}: {exc}")[:1000]
        return Applied(revision, "rejected", 0, 0, self.now() - t0, str(exc)[:1000], stage)

    def plan_full(self, objects: dict[str, bytes],
                  actual: Callable[[Entries], Entries] | None = None
                  ) -> tuple[Cluster, Desired, list[MapOp], dict[str, PrefixSet]]:
        """Compile objects and diff against the entries (no map write).

        actual, given the desired entries, reads what the maps hold now (after a restart);
        they then replace the entries this reconciler applied last."""
        chunks = self._chunks_of(objects)
        cluster = join_objects(objects, chunks)
        cluster.gateway(self.gateway)  # KeyError: this gateway is not in the intent
        desired = compile_gateway(cluster, self.gateway, self.ifindex_of, self.ids)
        if actual is not None:
            self.entries = actual(desired.entries)
        return cluster, desired, diff_entries(self.entries, desired.entries), chunks

    def load(self, objects: dict[str, bytes], revision: int,
             actual: Callable[[Entries], Entries] | None = None) -> Applied:
        """Reconcile the maps to a complete set of objects at a revision (see plan_full)."""
        t0 = self.now()
        self.seen, self.latest = max(self.seen, revision), dict(objects)
        try:
            cluster, desired, ops, chunks = self.plan_full(objects, actual)
        except KeyError:
            exc = InvalidIntentError(f"gateway {self.gateway} is not in the intent",
                                     path="store", where="gateways")
            return self._reject(revision, exc, t0)
        except Exception as exc:  # whatever a revision holds, it is rejected
            return self._reject(revision, exc, t0)
        try:
            self._apply(ops, track=False)
        except _ApplyFailed as failed:
            return self._reject(revision, failed.cause, t0, "apply")
        self.suspect = False
        self.entries = desired.entries
        self.cluster, self.desired, self.ids = cluster, desired, desired.ids
        self.chunks = chunks
        self.objects = dict(objects)
        self.revision = revision
        self.last_error = None
        n = count(ops)
        return Applied(revision, "full", n["put"], n["delete"], self.now() - t0)

    @property
    def cluster(self) -> Cluster | None:
        """The cluster of the last applied revision (pools rebuilt from the chunks on demand:
        the delta path needs only the VPCs, and concatenating a 250k-prefix pool after every
        one-route change cost milliseconds of each change)."""
        if self._stale and self._cluster is not None:
            self._cluster = self._with_pools(self._cluster, self._stale)
            self._stale = set()
        return self._cluster

    @cluster.setter
    def cluster(self, c: Cluster | None) -> None:
        self._cluster, self._stale = c, set()

    def warm(self) -> None:
        """Build the lookup dicts of bulk entries now, so the next delta does not pay for it."""
        for m in self.entries.values():
            if isinstance(m, Records):
                m.dict  # noqa: B018  (the property builds and keeps it)

    def _chunks_of(self, objects: dict[str, bytes]) -> dict[str, PrefixSet]:
        """Parsed chunks of objects, reusing those that did not change."""
        return {k: self.chunks[k] if k in self.chunks and self.objects.get(k) == v
                else parse_chunk(k, v) for k, v in objects.items() if k.startswith(POOL)}

    def on_events(self, events: Iterable[Event]) -> Applied | None:
        """Apply the events (in revision order) as one step; None if there were none."""
        events = sorted(events, key=lambda e: e.revision)
        if not events:
            return None
        revision = events[-1].revision
        base = self.latest
        objects = dict(base)
        for e in events:
            if e.value is None:
                objects.pop(e.key, None)
            else:
                objects[e.key] = e.value
        changed = {e.key for e in events}
        # The delta path diffs against the last applied objects: after a rejection the base
        # holds more than those, so the whole state is compiled.
        if self._cluster is None or self.desired is None or base != self.objects or any(
                not k.startswith(POOL) for k in changed):
            return self.load(objects, revision)
        t0 = self.now()
        try:
            ops = self._delta(objects, changed)
        except _ApplyFailed as failed:
            self.seen, self.latest = max(self.seen, revision), objects
            return self._reject(revision, failed.cause, t0, "apply")
        except Exception:  # _NeedFull, a bad chunk: the full path judges
            return self.load(objects, revision)
        n = count(ops)
        self.revision = revision
        self.seen, self.latest = revision, objects
        return Applied(revision, "delta", n["put"], n["delete"], self.now() - t0)

    def _delta(self, objects: dict[str, bytes], changed: set[str]) -> list[MapOp]:
        c = self._cluster  # its VPCs and pool names are current; only prefixes may lag
        assert c is not None and self.desired is not None
        pools = {p.name for p in c.storage_pools}
        new_chunks = {k: parse_chunk(k, objects[k]) for k in changed if k in objects}
        per_pool: dict[str, tuple[list[PrefixSet], list[PrefixSet]]] = {}
        for k in changed:
            pool = k[len(POOL):].rsplit("/", 1)[0]
            if pool not in pools:
                raise _NeedFull
            old = self.chunks.get(k, PrefixSet.empty())
            new = new_chunks.get(k, PrefixSet.empty())
            add, rem = per_pool.setdefault(pool, ([], []))
            add.append(_minus(new, old))
            rem.append(_minus(old, new))
        ops: list[MapOp] = []
        for pool, (adds, rems) in sorted(per_pool.items()):
            added, removed = concat(adds), concat(rems)
            old_part, new_part = route_delta(self.desired, c, pool, added, removed)
            for name in ("routes4", "routes6"):
                clash = [k for k in new_part[name] if k in self.entries.get(name, {})
                         and k not in old_part[name]]
                if clash:
                    raise _NeedFull  # a duplicate route: the full path validates and rejects
            ops += diff_entries(old_part, new_part,
                                ("routes4", "routes6", "vpcs"))
        self._apply(ops)
        for k in changed:
            if k in new_chunks:
                self.chunks[k] = new_chunks[k]
            else:
                self.chunks.pop(k, None)
        self.objects = objects
        self._stale |= set(per_pool)
        return ops

    def _with_pools(self, c: Cluster, pools: set[str]) -> Cluster:
        """The cluster with the prefixes of these pools rebuilt from the chunks."""
        out = []
        for p in c.storage_pools:
            if p.name in pools:
                own = [s for k, s in sorted(self.chunks.items())
                       if k[len(POOL):].rsplit("/", 1)[0] == p.name]
                p = p.model_copy(update={"prefixes": concat(own)})
            out.append(p)
        return c.model_copy(update={"storage_pools": out})


class _NeedFull(Exception):
    """The delta path cannot apply these events; recompile everything."""


class _ApplyFailed(Exception):
    """A map write failed (and what it had done was undone); cause is the sink's error."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause
