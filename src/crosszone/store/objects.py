"""The desired state as store objects: a cluster split into keys, and joined back.

`intent/core` holds the cluster document without the pools' prefixes (JSON); each pool's
prefixes are spread over up to 256 chunk keys `intent/pool/<pool>/<nnn>` by a hash of the prefix.
A million routes are then ~256 values of ~60 KB (etcd refuses single values above its request
limit), and a one-route change rewrites one chunk: the agent re-reads 4,000 prefixes, not a
million. The compact hosts (`hosts_compact`) are chunked the same way, `intent/hosts/<nnn>` by a
CRC of the host name, one text line per host. Chunks are a function of the prefix (the name)
alone, so the same cluster always gives the same keys and a diff of two clusters' objects is
exactly the keys that changed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import ValidationError

from crosszone.intent.checks import IntentProblem, as_error, check_cluster, format_loc
from crosszone.intent.cluster import to_document
from crosszone.intent.errors import InvalidIntentError
from crosszone.intent.hosts import HostError, HostSet, concat_hosts, parse_hosts
from crosszone.intent.prefixes import PrefixError, PrefixSet, parse_block
from crosszone.intent.schema import Cluster

CORE = "core"
POOL = "pool/"
HOSTS = "hosts/"
N_CHUNKS = 256
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def chunk_of4(addr: np.ndarray, plen: np.ndarray) -> np.ndarray:
    """Chunk index of IPv4 prefixes (Fibonacci hash of addr and length)."""
    key = (addr.astype(np.uint64) << np.uint64(8)) | plen.astype(np.uint64)
    with np.errstate(over="ignore"):
        return ((key * _GOLDEN) >> np.uint64(56)).astype(np.int64) % N_CHUNKS


def chunk_of6(hi: np.ndarray, lo: np.ndarray, plen: np.ndarray) -> np.ndarray:
    """Chunk index of IPv6 prefixes."""
    key = hi ^ (lo * np.uint64(31)) ^ plen.astype(np.uint64)
    with np.errstate(over="ignore"):
        return ((key * _GOLDEN) >> np.uint64(56)).astype(np.int64) % N_CHUNKS


def chunk_key(pool: str, chunk: int) -> str:
    """Store key of one chunk of a pool."""
    return f"{POOL}{pool}/{chunk:03d}"


def _subset(p: PrefixSet, m4: np.ndarray, m6: np.ndarray) -> PrefixSet:
    return PrefixSet(p.addr4[m4], p.plen4[m4], p.hi6[m6], p.lo6[m6], p.plen6[m6])


def chunk_text(p: PrefixSet) -> bytes:
    """A chunk's value: its prefixes, one per line, sorted (same set -> same bytes)."""
    o4 = np.lexsort((p.plen4, p.addr4))
    a = p.addr4[o4].astype(np.int64)
    octs = [(a >> s) & 255 for s in (24, 16, 8, 0)]
    lines = [f"{w}.{x}.{y}.{z}/{n}" for w, x, y, z, n in zip(
        *(o.tolist() for o in octs), p.plen4[o4].tolist())]
    lines += sorted(str(n) for n in _subset(p, np.zeros(len(p.addr4), bool),
                                            np.ones(len(p.hi6), bool)).networks())
    return "\n".join(lines).encode()


def split_pool(name: str, p: PrefixSet) -> dict[str, bytes]:
    """The chunk objects of one pool."""
    c4 = chunk_of4(p.addr4, p.plen4)
    c6 = chunk_of6(p.hi6, p.lo6, p.plen6)
    out = {}
    for c in sorted(set(c4.tolist()) | set(c6.tolist())):
        out[chunk_key(name, c)] = chunk_text(_subset(p, c4 == c, c6 == c))
    return out


def split_hosts(hs: HostSet) -> dict[str, bytes]:
    """The chunk objects of the compact hosts (by a CRC of the name; lines sorted)."""
    if len(hs) == 0:
        return {}
    ch = hs.chunk_of(N_CHUNKS)
    lines = hs.to_text().split("\n")
    by: dict[int, list[str]] = {}
    for c, line in zip(ch.tolist(), lines):
        by.setdefault(c, []).append(line)
    return {f"{HOSTS}{c:03d}": "\n".join(sorted(v)).encode() for c, v in sorted(by.items())}


def split_cluster(c: Cluster) -> dict[str, bytes]:
    """Cluster -> store objects (keys relative to intent/)."""
    doc = to_document(c, blocks=False)
    out = {CORE: json.dumps(doc, sort_keys=True).encode()}
    for pool in c.storage_pools:
        out.update(split_pool(pool.name, pool.prefixes))
    out.update(split_hosts(c.hosts_compact))
    return out


def join_hosts(objs: Mapping[str, bytes]) -> HostSet:
    """The compact hosts of a set of objects (InvalidIntentError naming the chunk)."""
    parts = []
    for key, value in sorted(objs.items()):
        if key.startswith(HOSTS):
            try:
                parts.append(parse_hosts(value.decode()))
            except (HostError, UnicodeDecodeError) as exc:
                raise InvalidIntentError(str(exc), path="store", where=key) from None
            except Exception as exc:  # any bytes may be stored: reject them
                raise InvalidIntentError(f"malformed ({type(exc).__name__}: {exc})"[:500],
                                         path="store", where=key) from None
    return concat_hosts(parts)


def concat(sets: list[PrefixSet]) -> PrefixSet:
    """One PrefixSet of several."""
    if not sets:
        return PrefixSet.empty()
    return PrefixSet(*(np.concatenate([getattr(s, f) for s in sets])
                       for f in ("addr4", "plen4", "hi6", "lo6", "plen6")))


def parse_chunk(key: str, value: bytes) -> PrefixSet:
    """A chunk's prefixes, or InvalidIntentError naming the key."""
    try:
        return parse_block(value.decode())
    except (PrefixError, UnicodeDecodeError) as exc:
        raise InvalidIntentError(str(exc), path="store", where=key) from None
    except Exception as exc:  # any bytes may be stored: reject them
        raise InvalidIntentError(f"malformed ({type(exc).__name__}: {exc})"[:500],
                                 path="store", where=key) from None


def _core_document(raw: bytes) -> dict:
    """intent/core as a JSON object, or InvalidIntentError (whatever the bytes are)."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError, TypeError) as exc:
        # RecursionError: a deeply nested array is refused by the decoder's depth guard
        msg = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise InvalidIntentError(f"not JSON: {msg}", path="store", where=CORE) from None
    if not isinstance(doc, dict):
        raise InvalidIntentError(f"not a JSON object but {type(doc).__name__}", path="store",
                                 where=CORE)
    pools = doc.get("storage_pools", [])
    if not isinstance(pools, list):
        raise InvalidIntentError(f"storage_pools is {type(pools).__name__}, not a list",
                                 path="store", where=f"{CORE}:storage_pools")
    return doc


def join_objects(objs: Mapping[str, bytes], chunks: Mapping[str, PrefixSet] | None = None
                 ) -> Cluster:
    """Store objects -> validated Cluster (InvalidIntentError if they do not make one).

    chunks may hold already parsed chunk prefixes by key (the agent caches them). The objects
    come from a store anyone with write access may fill, so any bytes are expected: whatever
    they are, the only error raised is InvalidIntentError naming the key."""
    try:
        return _join(objs, chunks)
    except InvalidIntentError:
        raise
    except Exception as exc:  # a decoder bug must reject, never crash
        # Guard of last resort: the explicit checks above should catch every malformed object;
        # anything that still slips through (a validator tripping over an odd type, recursion
        # in a deeply nested value) is a bad revision, not a reason to stop an agent.
        raise InvalidIntentError(f"malformed store objects ({type(exc).__name__}: {exc})"[:500],
                                 path="store", where=CORE) from None


def _join(objs: Mapping[str, bytes], chunks: Mapping[str, PrefixSet] | None) -> Cluster:
    if CORE not in objs:
        raise InvalidIntentError("no intent stored yet", path="store", where=CORE)
    doc = _core_document(objs[CORE])
    by_pool: dict[str, list[PrefixSet]] = {}
    for key, value in sorted(objs.items()):
        if key.startswith(POOL):
            pool = key[len(POOL):].rsplit("/", 1)[0]
            ps = chunks[key] if chunks and key in chunks else parse_chunk(key, value)
            by_pool.setdefault(pool, []).append(ps)
    for pool in doc.get("storage_pools", []):
        if isinstance(pool, dict):
            name = pool.get("name", "")
            pool["prefixes"] = concat(by_pool.get(name, []) if isinstance(name, str) else [])
    doc["hosts_compact"] = join_hosts(objs)
    try:
        c = Cluster.model_validate(doc)
        check_cluster(c)
    except IntentProblem as problem:
        raise as_error(problem, "store", None) from None
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
        raise InvalidIntentError(err["msg"], path="store",
                                 where=f"{CORE}:{format_loc(loc)}") from None
    return c


@dataclass(frozen=True)
class ObjectDiff:
    """The store writes from one set of objects to another."""

    writes: dict[str, bytes | None]

    @property
    def changed(self) -> list[str]:
        """Keys written or deleted."""
        return sorted(self.writes)


def diff_objects(old: Mapping[str, bytes], new: Mapping[str, bytes]) -> ObjectDiff:
    """Keys to put (changed or new) and to delete (None)."""
    writes: dict[str, bytes | None] = {k: v for k, v in new.items() if old.get(k) != v}
    writes.update({k: None for k in old if k not in new})
    return ObjectDiff(writes)
