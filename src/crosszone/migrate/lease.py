"""The migration runner's lease (`migration/runner`): exactly one process performs a migration.

A runner takes the lease before it acts and holds it while it runs. The lease names its owner
(host, pid and a random nonce, so a restarted process on the same host with the same pid is
another owner) and an expiry (wall clock, epoch seconds). It is written only by compare-and-
swap (`Store.put_if`), so of two processes that read the same free lease exactly one takes it:

- **taken** only when absent, unreadable, or expired (`kill -9` leaves no goodbye: its lease
  runs out after LEASE_TTL_S);
- **renewed** by its owner at every tick and, during a long action (a move that waits for the
  agents can take 8 s and more), every RENEW_EVERY_S from a thread (`keep`), so a runner in a
  long move never looks dead; a renewal that finds another owner's write raises LeaseLost and
  the runner stops instead of acting beside the new one;
- **released** only by its owner (a delete compared against the owner's own revision: a
  runner that exits after it lost the lease deletes nothing).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from crosszone.migrate.record import json_object, num
from crosszone.store.store import Store

RUNNER = "migration/runner"
#: A lease not renewed for this long is free (the docs' heartbeat timeout).
LEASE_TTL_S = 5.0
#: A runner renews once this much of its lease has passed (ticks in between write nothing).
RENEW_EVERY_S = 1.5


class LeaseError(RuntimeError):
    """The lease cannot be had, or was lost."""


class RunnerBusy(LeaseError):
    """Another runner holds a live lease; the message names it."""

    def __init__(self, info: dict[str, Any], now: float) -> None:
        super().__init__(f"another runner holds the migration: {describe(info)}, its lease "
                         f"runs {max(0.0, info['expires'] - now):.1f} s more (renewed while it "
                         "lives)")
        self.info = info


class LeaseLost(LeaseError):
    """This runner's lease was taken by another (it had expired): stop acting."""


def describe(info: dict[str, Any]) -> str:
    """'pid 123 on host h (nonce ab12)'."""
    o = info.get("owner", {})
    return f"pid {o.get('pid')} on {o.get('host')} (nonce {o.get('nonce')})"


def parse(raw: bytes | None) -> dict[str, Any] | None:
    """A stored lease {owner: {host, pid, nonce}, expires, beat}, or None when absent or not a
    lease (anything else in the key is no owner: it can be taken)."""
    doc = json_object(raw)
    if doc is None:
        return None
    owner, expires = doc.get("owner"), doc.get("expires")
    if not isinstance(owner, dict) or not all(isinstance(owner.get(k), str | int)
                                              for k in ("host", "pid", "nonce")):
        return None
    if not num(expires):
        return None
    beat = doc.get("beat")
    return {"owner": {k: owner[k] for k in ("host", "pid", "nonce")}, "expires": float(expires),
            "beat": float(beat) if num(beat) else None}


def read(store: Store) -> dict[str, Any] | None:
    """The stored lease (None: none, or not a lease)."""
    return parse(store.get(RUNNER))


def alive(store: Store, now: float) -> dict[str, Any] | None:
    """The live lease (its owner will perform operations), or None."""
    info = read(store)
    return info if info is not None and info["expires"] > now else None


class Lease:
    """One runner's claim on `migration/runner`."""

    def __init__(self, store: Store, clock: Callable[[], float] = time.time,
                 ttl: float = LEASE_TTL_S, renew_every: float = RENEW_EVERY_S) -> None:
        self.store, self.clock, self.ttl, self.renew_every = store, clock, ttl, renew_every
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(),
                      "nonce": secrets.token_hex(6)}
        self.rev = 0          # revision of our last write (0: not held)
        self.written = 0.0    # clock of our last write
        self.lost: str | None = None  # why the lease was lost (a renewal from the thread)
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        """Whether this runner holds the lease (as far as it knows: renew checks)."""
        return self.rev != 0

    def _doc(self, now: float) -> bytes:
        return json.dumps({"owner": self.owner, "expires": now + self.ttl,
                           "beat": now}).encode()

    def acquire(self) -> None:
        """Take the lease (RunnerBusy naming the owner when another holds a live one)."""
        with self._lock:
            if self.rev:
                return
            self.lost = None
            raw, rev = self.store.get_versioned(RUNNER)
            info, now = parse(raw), self.clock()
            if info is not None and info["expires"] > now and info["owner"] != self.owner:
                raise RunnerBusy(info, now)
            got = self.store.put_if(RUNNER, self._doc(now), rev)
            if got is None:  # another process took it between our read and our write
                info = read(self.store)
                raise RunnerBusy(info or {"owner": {}, "expires": now}, now)
            self.rev, self.written = got, now

    def renew(self, force: bool = False) -> None:
        """Extend the lease once RENEW_EVERY_S passed since the last write (LeaseLost when
        another owner wrote it meanwhile)."""
        with self._lock:
            if self.lost is not None:
                raise LeaseLost(self.lost)
            if not self.rev:
                return
            now = self.clock()
            if not force and now - self.written < self.renew_every:
                return
            got = self.store.put_if(RUNNER, self._doc(now), self.rev)
            if got is None:
                self.rev = 0
                info = read(self.store)
                self.lost = ("this runner's lease was taken over"
                             + (f" by {describe(info)}" if info else "")
                             + f": it stops here (it had not renewed within {self.ttl:g} s)")
                raise LeaseLost(self.lost)
            self.rev, self.written = got, now

    def release(self) -> None:
        """Give the lease up (only ours: a lease another took over is left alone)."""
        with self._lock:
            if self.rev:
                self.store.put_if(RUNNER, None, self.rev)
                self.rev = 0

    @contextlib.contextmanager
    def keep(self, every: float | None = None) -> Iterator[None]:
        """Renew from a thread while a long action runs (a move, a drain reading)."""
        if not self.rev:
            yield
            return
        stop = threading.Event()
        period = every if every is not None else self.renew_every

        def loop() -> None:
            while not stop.wait(period):
                try:
                    self.renew(force=True)
                except (LeaseError, OSError):
                    return  # the main thread finds out at its next renewal
        thread = threading.Thread(target=loop, daemon=True, name="migration-lease")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=5)
