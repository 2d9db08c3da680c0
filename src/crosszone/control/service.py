"""The controller's logic, independent of HTTP: apply intents and prefix changes, diff, status.

The controller is the single writer of `intent/`. It keeps the current objects and cluster in
memory (read from the store at start), validates every change completely before it writes, and
writes only the keys that changed, in one store transaction (one revision). A rejected change
writes nothing: the agents keep running the last good state.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from crosszone.compile.diff import diff_entries
from crosszone.compile.gateway import compile_gateway
from crosszone.intent.checks import (
    IntentProblem,
    as_error,
    check_cluster,
    check_route_capacity,
    route_counts,
)
from crosszone.intent.cluster import parse_cluster, to_document
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.hosts import HostSet
from crosszone.intent.prefixes import PrefixError, PrefixSet, member_sorted, parse_block
from crosszone.intent.schema import Cluster
from crosszone.store.objects import (
    POOL,
    chunk_of4,
    chunk_of6,
    concat,
    diff_objects,
    join_objects,
    parse_chunk,
    split_cluster,
    split_pool,
)
from crosszone.store.store import INTENT, STATUS, Store


@dataclass(frozen=True)
class ApplyResult:
    """The outcome of an apply or a dry run."""

    revision: int | None          # None: dry run or nothing changed
    changed: list[str]
    gateways: dict[str, dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"revision": self.revision, "changed": self.changed, "gateways": self.gateways}


def _lo(_: str) -> int:
    return 1  # dry runs compile ports against a placeholder ifindex


class Controller:
    """Desired state in memory, persisted in a Store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._lock = threading.Lock()
        items, self.revision = store.get_prefix(INTENT)
        self.objects = {k[len(INTENT):]: v for k, v in items.items()}
        #: why the stored intent could not be read at start (None: it could, or there is none)
        self.stored_problem: str | None = None
        self.cluster: Cluster | None = None
        try:
            self.cluster = join_objects(self.objects) if self.objects else None
        except InvalidIntentError as exc:
            # A store written by something else (or by an older, laxer controller) must not keep
            # the controller down: it serves, reports the problem, and the next apply replaces
            # the bad objects (agents keep rejecting that revision meanwhile).
            self.stored_problem = (f"the stored intent (revision {self.revision}) is invalid: "
                                   f"{exc}; apply a valid intent to replace it")
        # pool -> its IPv4 prefixes as sorted packed keys, kept up to date by prefix changes
        # (membership of a few keys is then a binary search, not a sort of the pool)
        self._keys4: dict[str, np.ndarray] = {}
        #: (revision, cluster) as one value: a reader takes both without the write lock
        self._current: tuple[int, Cluster | None] = (self.revision, self.cluster)
        # GET /v1/intent's answer for one cluster (see intent_json); built by one reader at
        # a time, under its own lock (never the write lock: reads must not delay writes)
        self._doc_lock = threading.Lock()
        self._doc: tuple[Cluster, bytes] | None = None
        # id(prefix or host set) -> (the set, its block text): a prefix change replaces one
        # pool's set and keeps the others, so a rebuild renders one pool, not all of them
        self._texts: dict[int, tuple[PrefixSet | HostSet, str]] = {}

    def _sorted4(self, pool: str) -> np.ndarray:
        """The sorted packed IPv4 keys of a pool of the current cluster."""
        if pool not in self._keys4:
            assert self.cluster is not None
            p = next(p for p in self.cluster.storage_pools if p.name == pool)
            self._keys4[pool] = np.sort(p.prefixes.keys4())
        return self._keys4[pool]

    def gateway_diff(self, old: Cluster | None, new: Cluster) -> dict[str, dict[str, Any]]:
        """Per gateway: map entries that would be put and deleted."""
        out: dict[str, dict[str, Any]] = {}
        for gw in new.gateways:
            before = compile_gateway(old, gw.name, _lo).entries if old is not None and any(
                g.name == gw.name for g in old.gateways) else {}
            after = compile_gateway(new, gw.name, _lo).entries
            ops = diff_entries(before, after)
            summary: dict[str, dict[str, int]] = {"put": {}, "delete": {}}
            for op in ops:
                summary[op.kind][op.map] = summary[op.kind].get(op.map, 0) + len(op)
            out[gw.name] = summary
        if old is not None:
            for gw in old.gateways:
                out.setdefault(gw.name, {"removed": True})
        return out

    def apply(self, text: str, dry_run: bool = False, source: str = "request") -> ApplyResult:
        """Validate a whole intent (YAML) and store what changed (unless dry_run)."""
        new = parse_cluster(text, source)
        objs = split_cluster(new)
        with self._lock:
            d = diff_objects(self.objects, objs)
            gws = self.gateway_diff(self.cluster, new)
            if dry_run or not d.writes:
                return ApplyResult(None, d.changed, gws)
            rev = self.store.put_many({INTENT + k: v for k, v in d.writes.items()})
            self.objects, self.cluster, self.revision = objs, new, rev
            self._current = (rev, new)
            self.stored_problem = None
            self._keys4 = {}
            return ApplyResult(rev, d.changed, gws)

    def change_prefixes(self, pool: str, add: list[str], remove: list[str],
                        dry_run: bool = False) -> ApplyResult:
        """Add and remove prefixes of one pool (the fast path of a route change)."""
        with self._lock:
            if self.cluster is None:
                raise InvalidIntentError(self.stored_problem or "no intent applied yet",
                                         path="request")
            names = [p.name for p in self.cluster.storage_pools]
            if pool not in names:
                raise InvalidIntentError(f"no storage pool {pool!r}", path="request",
                                         where="pool")
            k = names.index(pool)
            cur = self.cluster.storage_pools[k].prefixes
            try:
                plus, minus = parse_block(" ".join(add)), parse_block(" ".join(remove))
            except PrefixError as exc:
                raise InvalidIntentError(str(exc), path="request", where="prefixes") from None
            new_set, new_keys = self._edit(cur, plus, minus, pool)
            cluster = self.cluster.model_copy(update={"storage_pools": [
                p.model_copy(update={"prefixes": new_set}) if i == k else p
                for i, p in enumerate(self.cluster.storage_pools)]})
            self._check_delta(cluster, pool, plus)
            touched = set(chunk_of4(plus.addr4, plus.plen4).tolist()) | set(
                chunk_of4(minus.addr4, minus.plen4).tolist()) | set(
                chunk_of6(plus.hi6, plus.lo6, plus.plen6).tolist()) | set(
                chunk_of6(minus.hi6, minus.lo6, minus.plen6).tolist())
            writes = self._chunk_writes(pool, new_set, touched)
            if dry_run or not writes:
                return ApplyResult(None, sorted(writes), {})
            rev = self.store.put_many({INTENT + k: v for k, v in writes.items()})
            for key, v in writes.items():
                if v is None:
                    self.objects.pop(key, None)
                else:
                    self.objects[key] = v
            self.cluster, self.revision = cluster, rev
            self._current = (rev, cluster)
            self._keys4[pool] = new_keys
            return ApplyResult(rev, sorted(writes), {})

    def _edit(self, cur: PrefixSet, plus: PrefixSet, minus: PrefixSet, pool: str
              ) -> tuple[PrefixSet, np.ndarray]:
        """The pool's prefixes after the change, and their sorted packed IPv4 keys."""
        where = f"storage_pools[{pool}].prefixes"
        s = self._sorted4(pool)
        k_plus, k_minus = plus.keys4(), minus.keys4()
        if member_sorted(s, k_plus).any() or len(np.unique(k_plus)) != len(k_plus):
            raise InvalidIntentError("a prefix to add is already in the pool", path="request",
                                     where=where)
        if not member_sorted(s, k_minus).all() or len(np.unique(k_minus)) != len(k_minus):
            raise InvalidIntentError("a prefix to remove is not in the pool", path="request",
                                     where=where)
        # IPv6 prefixes are few (at most CZ_MAX_PLENS6 lengths per VPC): plain sets suffice.
        have6, add6, del6 = cur.networks6(), plus.networks6(), minus.networks6()
        have6_set = set(have6)
        for net in add6:
            if net in have6_set or add6.count(net) > 1:
                raise InvalidIntentError(f"a prefix to add is already in the pool: {net}",
                                         path="request", where=where)
        for net in del6:
            if net not in have6_set or del6.count(net) > 1:
                raise InvalidIntentError(f"a prefix to remove is not in the pool: {net}",
                                         path="request", where=where)
        if len(k_minus):
            keep = ~member_sorted(np.sort(k_minus), cur.keys4())
            s = np.delete(s, np.searchsorted(s, k_minus))
        else:
            keep = slice(None)  # type: ignore[assignment]
        k_sorted = np.sort(k_plus)
        s = np.insert(s, np.searchsorted(s, k_sorted), k_sorted)
        six_minus = set(del6)
        rest = PrefixSet.from_networks([n for n in have6 if n not in six_minus] + add6)
        return concat([PrefixSet(cur.addr4[keep], cur.plen4[keep], rest.hi6, rest.lo6,
                                 rest.plen6), PrefixSet(plus.addr4, plus.plen4, *(
                                     np.zeros(0, t) for t in (np.uint64, np.uint64, np.uint8)))]), s

    def _check_delta(self, cluster: Cluster, pool: str, plus: PrefixSet) -> None:
        """Validate the cluster after a prefix change with the one checker, without paying for
        a million-route validation on a one-route change.

        check_cluster runs on the new cluster with every pool's IPv4 prefixes replaced by the
        added ones (hosts left out: a prefix change cannot affect them). What that leaves out
        is exactly what needs the whole IPv4 sets: duplicates of an added prefix in another
        pool of the same VPC (binary search in the sorted keys here; duplicates within the
        pool were refused by _edit) and the table capacity (the checker's route_counts and
        check_route_capacity on the whole cluster). IPv6 is kept whole
        (few prefixes), so its duplicates and distinct lengths per VPC are checked as usual."""
        for i, v in enumerate(cluster.vpcs):
            if pool not in v.storage_pools or len(plus.addr4) == 0:
                continue
            for other in v.storage_pools:
                if other != pool and member_sorted(self._sorted4(other), plus.keys4()).any():
                    raise InvalidIntentError(f"a prefix to add is already a route of VPC "
                                             f"{v.name} (storage pool {other})", path="request",
                                             where=f"vpcs[{i}]")
        try:
            check_route_capacity(*route_counts(cluster))
        except IntentProblem as problem:
            raise as_error(problem, "request", None) from None
        empty = PrefixSet.empty()

        def reduced(name: str, ps: PrefixSet) -> PrefixSet:
            four = plus if name == pool else empty
            return PrefixSet(four.addr4, four.plen4, ps.hi6, ps.lo6, ps.plen6)

        small = cluster.model_copy(update={
            "hosts": [], "hosts_compact": HostSet.empty(),
            "storage_pools": [p.model_copy(update={"prefixes": reduced(p.name, p.prefixes)})
                              for p in cluster.storage_pools]})
        try:
            check_cluster(small)
        except IntentProblem as problem:
            raise as_error(problem, "request", None) from None

    def _chunk_writes(self, pool: str, new_set: PrefixSet, touched: set[int]
                      ) -> dict[str, bytes | None]:
        # Only the touched chunks are re-rendered: a one-route change costs one chunk, not a pool.
        m4 = np.isin(chunk_of4(new_set.addr4, new_set.plen4), list(touched))
        m6 = np.isin(chunk_of6(new_set.hi6, new_set.lo6, new_set.plen6), list(touched))
        fresh = split_pool(pool, PrefixSet(new_set.addr4[m4], new_set.plen4[m4], new_set.hi6[m6],
                                           new_set.lo6[m6], new_set.plen6[m6]))
        writes: dict[str, bytes | None] = {}
        for c in touched:
            key = f"{POOL}{pool}/{c:03d}"
            if key in fresh and self.objects.get(key) != fresh[key]:
                writes[key] = fresh[key]
            elif key not in fresh and key in self.objects:
                writes[key] = None
        return writes

    def document(self) -> dict[str, Any]:
        """The desired state as a version-2 document."""
        if self.cluster is None:
            raise InvalidIntentError(self.stored_problem or "no intent applied yet", path="store")
        return to_document(self.cluster)

    def intent_json(self) -> bytes:
        """`{"revision": r, "intent": document}` as JSON, built once per revision.

        At 100k routes the document takes ~60 ms of CPU to build and is 1.5 MB; built for
        every GET, eight open read loops held the GIL so often that a one-route change went
        from 4 to 190 ms (issue 26). Now a write costs the readers one build, shared by all:
        one reader builds (the others wait on the lock, then take the same bytes)."""
        with self._doc_lock:
            rev, cluster = self._current
            if cluster is None:
                raise InvalidIntentError(self.stored_problem or "no intent applied yet",
                                         path="store")
            if self._doc is None or self._doc[0] is not cluster:
                body = json.dumps({"revision": rev, "intent": self._document(cluster)},
                                  separators=(",", ":"), allow_nan=False).encode()
                self._doc = (cluster, body)
            return self._doc[1]

    def _document(self, cluster: Cluster) -> dict[str, Any]:
        """to_document(cluster), with the block texts of the pools' prefixes and the compact
        hosts taken from _texts when their sets have not changed (rendering 100k prefixes
        costs 45 ms; a one-route change changes one pool)."""
        texts: dict[int, tuple[PrefixSet | HostSet, str]] = {}

        def text(block: PrefixSet | HostSet) -> str:
            have = self._texts.get(id(block))
            texts[id(block)] = have if have is not None and have[0] is block else (
                block, block.to_text())
            return texts[id(block)][1]

        doc = to_document(cluster, blocks=False)
        for pool, out in zip(cluster.storage_pools, doc["storage_pools"], strict=True):
            out["prefixes"] = text(pool.prefixes)
        if len(cluster.hosts_compact):  # where to_document puts it: before the pools
            pools = doc.pop("storage_pools")
            doc["hosts_compact"] = text(cluster.hosts_compact) + "\n"
            doc["storage_pools"] = pools
        self._texts = texts  # only the current sets: the cache never outgrows one intent
        return doc

    def status(self) -> dict[str, Any]:
        """Every gateway's last report, plus the desired revision."""
        items, _rev = self.store.get_prefix(STATUS)
        gws = {k[len(STATUS):]: _status_value(v) for k, v in items.items()}
        for gw in (self.cluster.gateways if self.cluster else []):
            gws.setdefault(gw.name, {"health": "unknown", "revision": None})
        out: dict[str, Any] = {"desired_revision": self.revision, "gateways": gws}
        if self.stored_problem:
            out["stored_problem"] = self.stored_problem
        return out


def _status_value(raw: bytes) -> dict[str, Any]:
    """An agent's status report, or a note that it could not be read (a bad value in the store
    must not break the status endpoint)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return {"health": "unreadable", "revision": None}
    return value if isinstance(value, dict) else {"health": "unreadable", "revision": None}


def parse_chunks(objects: dict[str, bytes]) -> dict[str, PrefixSet]:
    """Every chunk of a set of objects, parsed (tests)."""
    return {k: parse_chunk(k, v) for k, v in objects.items() if k.startswith(POOL)}
