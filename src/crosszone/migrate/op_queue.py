"""Operators' operations on a migration: a queue of documents, each answered (`migration/op/`).

`crosszone migrate pause|resume|rollback|finish` (while a runner is alive) and the controller's
POST /v1/migration/{op} queue an operation as its own key, `migration/op/<id>`; ids sort by the
time they were queued. Nothing overwrites another operation (one key per operation, created by
compare-and-swap), and each is answered in its own document:

    {"id", "op", "t", "expires", "reason", "runner", "status", "why", "answered", "state"}

`status` goes `queued` -> `running` -> `done` or `refused` (`why` says why), or `queued` ->
`expired`. An operation is addressed to the runner whose lease was live when it was queued
(`runner`: that lease's nonce, None when none was): only that runner performs it, within
`expires`. Any other runner expires it instead ("queued while no runner was alive", "queued for
a runner that is gone"), so an operation is never performed later, by another runner, in a
state its operator did not see. The caller that queued it (the CLI) withdraws it by compare-
and-swap when its runner died, and then acts itself; a runner takes an operation by the same
compare-and-swap, so exactly one of them does.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

from crosszone.migrate.record import json_object, num
from crosszone.store.store import Store

OP_PREFIX = "migration/op/"
#: How long a queued operation waits for its runner (a move in progress holds the next tick).
OP_TTL_S = 60.0
#: Answered operations kept for reading (older ones are deleted by the runner).
KEEP_ANSWERED = 20
QUEUED, RUNNING, DONE, REFUSED, EXPIRED = "queued", "running", "done", "refused", "expired"
ANSWERED = (DONE, REFUSED, EXPIRED)
STATUSES = (QUEUED, RUNNING, *ANSWERED)
_last_us = 0  # the last id's time in this process


def parse(raw: bytes | None) -> dict[str, Any] | None:
    """An operation document, or None when the value is not one."""
    doc = json_object(raw)
    if doc is None or not isinstance(doc.get("id"), str) \
            or not isinstance(doc.get("op"), str) or doc.get("status") not in STATUSES \
            or not num(doc.get("t")) or not num(doc.get("expires")):
        return None
    if any(doc.get(k) is not None and not isinstance(doc.get(k), str)
           for k in ("reason", "runner", "why", "state")):
        return None
    if doc.get("plan") is not None and not isinstance(doc["plan"], dict):
        return None
    return doc


def queue(store: Store, op: str, now: float, reason: str, runner: str | None,
          plan: dict[str, Any] | None = None, ttl: float = OP_TTL_S) -> dict[str, Any]:
    """Queue one operation for `runner` (a lease nonce; None: no runner was alive)."""
    global _last_us
    while True:
        # microseconds, never the same twice in one process: its operations sort in order
        _last_us = max(int(now * 1_000_000), _last_us + 1)
        op_id = f"{_last_us:017d}-{secrets.token_hex(4)}"
        doc: dict[str, Any] = {"id": op_id, "op": op, "t": now, "expires": now + ttl,
                               "reason": reason, "runner": runner, "status": QUEUED}
        if plan is not None:
            doc["plan"] = plan
        if store.put_if(OP_PREFIX + op_id, json.dumps(doc).encode(), 0) is not None:
            return doc


def read(store: Store, op_id: str, now: float) -> dict[str, Any] | None:
    """One operation as it stands (a queued one past its expiry reads `expired`)."""
    return _as_of(parse(store.get(OP_PREFIX + op_id)), now)


def claim_single(store: Store, key: str, doc: dict[str, Any], now: float,
                 live_runner: str | None) -> dict[str, Any] | None:
    """Make `doc` the one pending operation of its kind (`key` holds its id, written by
    compare-and-swap): None when it is, else the pending operation that holds the key (queued,
    or running on the live runner `live_runner`)."""
    raw, rev = store.get_versioned(key)
    if raw is not None:
        held = read(store, raw.decode(errors="replace"), now)
        if held is not None and (held["status"] == QUEUED or (
                held["status"] == RUNNING and held.get("runner") == live_runner)):
            return held
    if store.put_if(key, doc["id"].encode(), rev) is None:  # another caller, this moment
        raw = store.get(key)
        won = read(store, raw.decode(errors="replace"), now) if raw else None
        return won or {"id": "?", "status": QUEUED}
    return None


def recent(store: Store, now: float, n: int = 10) -> list[dict[str, Any]]:
    """The last n operations, oldest first (a stored value that is not one says so)."""
    items, _ = store.get_prefix(OP_PREFIX)
    return [_as_of(parse(items[k]), now) or {"id": k.removeprefix(OP_PREFIX),
                                               "status": "unreadable"}
            for k in sorted(items)[-n:]]


def _as_of(doc: dict[str, Any] | None, now: float) -> dict[str, Any] | None:
    """The document as it stands at `now` (a queued one past its expiry reads `expired`)."""
    if doc is not None and doc["status"] == QUEUED and now > doc["expires"]:
        return {**doc, "status": EXPIRED, "why": "no runner took it before it expired"}
    return doc


def _answer(store: Store, key: str, doc: dict[str, Any], rev: int, status: str,
            why: str | None, now: float, state: str | None = None) -> bool:
    new = {**doc, "status": status, "why": why, "answered": now, "state": state}
    return store.put_if(key, json.dumps(new).encode(), rev) is not None


def withdraw(store: Store, op_id: str, now: float, why: str) -> bool:
    """Expire a queued operation that its runner has not taken (False: it was taken)."""
    raw, rev = store.get_versioned(OP_PREFIX + op_id)
    doc = parse(raw)
    if doc is None or doc["status"] != QUEUED:
        return False
    return _answer(store, OP_PREFIX + op_id, doc, rev, EXPIRED, why, now)


def answer(store: Store, doc: dict[str, Any], status: str, why: str | None, now: float,
           state: str | None) -> None:
    """Say what became of an operation this runner took."""
    key = OP_PREFIX + doc["id"]
    _, rev = store.get_versioned(key)
    _answer(store, key, doc, rev, status, why, now, state)


def take(store: Store, runner: str, now: float) -> Iterator[dict[str, Any]]:
    """The operations queued for `runner`, oldest first, each marked `running` (taken by
    compare-and-swap); the others met on the way are expired or refused with the reason."""
    items, _ = store.get_prefix(OP_PREFIX)
    for key in sorted(items):
        doc = parse(items[key])
        if doc is not None and doc["status"] != QUEUED:
            continue
        raw, rev = store.get_versioned(key)
        doc = parse(raw)
        if raw is None or (doc is not None and doc["status"] != QUEUED):
            continue
        if doc is None:
            bad = {"id": key.removeprefix(OP_PREFIX), "op": "?", "t": now, "expires": now}
            _answer(store, key, bad, rev, REFUSED, "not an operation document", now)
            continue
        if now > doc["expires"]:
            _answer(store, key, doc, rev, EXPIRED, "not taken before it expired", now)
        elif doc.get("runner") != runner:
            why = ("queued while no runner was alive" if doc.get("runner") is None
                   else f"queued for runner {doc['runner']}, which is gone")
            _answer(store, key, doc, rev, EXPIRED, why, now)
        elif _answer(store, key, doc, rev, RUNNING, None, now):
            yield {**doc, "status": RUNNING}


def prune(store: Store, keep: int = KEEP_ANSWERED) -> None:
    """Delete answered operations beyond the newest `keep` (one transaction)."""
    items, _ = store.get_prefix(OP_PREFIX)
    answered = [k for k in sorted(items)
                if (parse(items[k]) or {"status": REFUSED})["status"] in ANSWERED]
    if len(answered) > keep:
        store.put_many(dict.fromkeys(answered[:-keep]))
