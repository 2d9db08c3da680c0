"""The embedded store: one SQLite file, nothing to run.

Table `kv` holds the current value of each key with the revision that wrote it; table `log`
holds every change (key, value or NULL, revision) so that `watch` can replay from any revision.
WAL mode lets the controller write while agents in other processes read. SQLite has no
cross-process notification, so a watch reads the log table when the database's files change:
it waits on inotify for a write to the database or its `-wal` file (linux/inotify.py), then
reads `PRAGMA data_version` (one cheap statement) and the new log rows. For `HOT_S` after a
change it checks every `poll_s` (2 ms) too, since a commit's write to the `-wal` file comes
just before the commit is visible; when nothing changes, every `idle_s` (50 ms) as a backstop.
Without inotify (none, or `fs.inotify.max_user_instances` reached) it polls every `poll_s`.
`crosszone bench store-watch` measures both (docs/control.md): idle, 0.3 % of a core instead of
2.7 % polling; a write by another process seen after 0.41 ms at the median instead of 1.41.

The log is compacted as it grows: every `max_log_rows // 4` rows written, if it holds more than
`max_log_rows` rows, the oldest revisions are dropped so that the newest `max_log_rows // 2` rows
remain (whole revisions; `kv` always holds the latest value of every key). A watcher still at a
dropped revision gets `RevisionCompacted` and reads the whole state again, as with etcd.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Mapping

from crosszone.linux.inotify import DirChanges
from crosszone.store.store import Event, RevisionCompacted, Store, StoreUnavailable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, rev INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS log (rev INTEGER NOT NULL, key TEXT NOT NULL, value BLOB);
CREATE INDEX IF NOT EXISTS log_rev ON log (rev);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('revision', 0);
INSERT OR IGNORE INTO meta VALUES ('compacted', 0);
"""
#: How long after a change to the database's files a watch also checks every `poll_s`.
HOT_S = 1.0


class SqliteStore(Store):
    """A Store in one SQLite file."""

    #: Threads of one store that may hold an inotify instance; the others poll. Instances are
    #: a per-user resource (`fs.inotify.max_user_instances`, 128 by default) that other
    #: software on the host needs too.
    max_notify_threads = 8

    def __init__(self, path: str, poll_s: float = 0.002,
                 sleep: Callable[[float], None] = time.sleep,
                 now: Callable[[], float] = time.monotonic, max_log_rows: int = 20_000,
                 idle_s: float = 0.05, notify: bool = True) -> None:
        """`notify`: wait on inotify between checks (off, or with an injected `sleep`: poll
        every `poll_s`)."""
        self.path = path
        self.max_log_rows = max_log_rows
        self._rows_since = 0  # rows written since the last compaction check
        self.poll_s = poll_s
        self.idle_s = max(idle_s, poll_s)
        self._sleep = sleep
        self._now = now
        self.notify = notify and sleep is time.sleep and path != ":memory:" \
            and not path.startswith("file:")
        self._changed_at = float("-inf")  # when a watch last saw the files change
        self._local = threading.local()
        self._notify_lock = threading.Lock()
        self._instances: list[DirChanges] = []  # every thread's, closed with the store
        weakref.finalize(self, _close_all, self._instances)
        self._lock = threading.Lock()
        self._writes = 0  # data_version ignores this connection's own commits
        try:
            self._db = sqlite3.connect(path, timeout=10, check_same_thread=False,
                                       isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite {path}: {exc}") from None

    def _run(self, fn: Callable[[sqlite3.Connection], object]) -> object:
        with self._lock:
            try:
                return fn(self._db)
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"sqlite {self.path}: {exc}") from None

    def put_many(self, items: Mapping[str, bytes | None]) -> int:
        """Write all items in one transaction with one new revision."""
        rev = self._write(items, None)
        assert rev is not None
        return rev

    def put_if(self, key: str, value: bytes | None, revision: int) -> int | None:
        """Write one key only while its revision is still `revision` (0: absent); the check
        and the write are one IMMEDIATE transaction, so a concurrent writer waits for it."""
        return self._write({key: value}, (key, revision))

    def get_versioned(self, key: str) -> tuple[bytes | None, int]:
        """One key's value and the revision that wrote it ((None, 0): absent)."""
        row = self._run(lambda db: db.execute("SELECT value, rev FROM kv WHERE key=?",
                                              (key,)).fetchone())
        if row is None:
            return None, 0
        return bytes(row[0]), int(row[1])  # type: ignore[index]

    def _write(self, items: Mapping[str, bytes | None], expect: tuple[str, int] | None
               ) -> int | None:
        """One transaction with one new revision; None (nothing written) when `expect`'s key
        was last written at another revision."""
        def tx(db: sqlite3.Connection) -> int | None:
            db.execute("BEGIN IMMEDIATE")
            try:
                if expect is not None:
                    row = db.execute("SELECT rev FROM kv WHERE key=?", (expect[0],)).fetchone()
                    if (int(row[0]) if row else 0) != expect[1]:
                        db.execute("ROLLBACK")
                        return None
                rev = db.execute("SELECT value FROM meta WHERE name='revision'").fetchone()[0] + 1
                db.execute("UPDATE meta SET value=? WHERE name='revision'", (rev,))
                puts = [(k, v, rev) for k, v in items.items() if v is not None]
                dels = [(k,) for k, v in items.items() if v is None]
                db.executemany("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", puts)
                db.executemany("DELETE FROM kv WHERE key=?", dels)
                db.executemany("INSERT INTO log VALUES (?, ?, ?)",
                               [(rev, k, v) for k, v in items.items()])
                db.execute("COMMIT")
                self._writes += 1
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return int(rev)
        done = self._run(tx)
        if done is None:
            return None
        self._rows_since += len(items)
        if self._rows_since >= max(1, self.max_log_rows // 4):
            self._rows_since = 0
            self.compact_if_large()
        return int(done)  # type: ignore[call-overload]

    def log_rows(self) -> int:
        """Rows in the change log."""
        return int(self._run(lambda db: db.execute(  # type: ignore[call-overload]
            "SELECT count(*) FROM log").fetchone()[0]))

    def compact_if_large(self) -> int:
        """Compact when the log holds more than max_log_rows; the revision kept after (0: none).

        Several processes may write one file: each checks after its own writes, and compacting
        twice is harmless."""
        if self.log_rows() <= self.max_log_rows:
            return 0
        row = self._run(lambda db: db.execute(
            "SELECT rev FROM log ORDER BY rev DESC, rowid DESC LIMIT 1 OFFSET ?",
            (self.max_log_rows // 2,)).fetchone())
        if row is None:
            return 0
        horizon = int(row[0])  # type: ignore[index]
        self.compact(horizon)
        return horizon

    def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        """All keys under prefix, read in one transaction with the revision."""
        def tx(db: sqlite3.Connection) -> tuple[dict[str, bytes], int]:
            db.execute("BEGIN")
            try:
                rev = db.execute("SELECT value FROM meta WHERE name='revision'").fetchone()[0]
                rows = db.execute("SELECT key, value FROM kv WHERE key >= ? AND key < ?",
                                  (prefix, prefix + "\U0010ffff")).fetchall()
            finally:
                db.execute("COMMIT")
            return {k: bytes(v) for k, v in rows}, rev
        return self._run(tx)  # type: ignore[return-value]

    def revision(self) -> int:
        """The current revision."""
        return int(self._run(lambda db: db.execute(  # type: ignore[call-overload]
            "SELECT value FROM meta WHERE name='revision'").fetchone()[0]))

    def watch(self, prefix: str, after: int, timeout: float) -> list[Event]:
        """The events under prefix after `after`, as soon as there are some (at most `timeout`
        seconds: then [])."""
        return self._watch(prefix, after, self._now() + timeout, self._changes())

    def _changes(self) -> DirChanges | None:
        """This thread's inotify watch of the database's directory (None: poll). Opened once per
        thread and kept until close(): closing an inotify instance waits for the kernel's SRCU
        grace period (measured: 4-16 ms, on the jiffy), which a watch per call would pay."""
        if not self.notify:
            return None
        local = self._local
        if not hasattr(local, "changes"):
            path = os.path.abspath(self.path)
            local.changes = None  # this thread polls
            with self._notify_lock:
                if len(self._instances) < self.max_notify_threads:
                    with contextlib.suppress(OSError):
                        local.changes = DirChanges(os.path.dirname(path),
                                                   os.path.basename(path))
                        self._instances.append(local.changes)
        return local.changes  # type: ignore[no-any-return]

    def _watch(self, prefix: str, after: int, deadline: float,
               changes: DirChanges | None) -> list[Event]:
        version = None
        while True:
            def read(db: sqlite3.Connection, version: object = version
                     ) -> tuple[object, list[tuple[int, str, bytes | None]]]:
                v = (db.execute("PRAGMA data_version").fetchone()[0], self._writes)
                if v == version:
                    return v, []
                oldest = db.execute("SELECT value FROM meta WHERE name='compacted'").fetchone()[0]
                if after < oldest:
                    raise RevisionCompacted(after, oldest)
                return v, db.execute(
                    "SELECT rev, key, value FROM log WHERE rev > ? AND key >= ? AND key < ? "
                    "ORDER BY rev, rowid", (after, prefix, prefix + "\U0010ffff")).fetchall()
            rows: list[tuple[int, str, bytes | None]]
            version, rows = self._run(read)  # type: ignore[misc]
            if rows:
                return [Event(r, k, bytes(v) if v is not None else None) for r, k, v in rows]
            now = self._now()
            if now >= deadline:
                return []
            if changes is None:
                self._sleep(self.poll_s)
                continue
            hot = now - self._changed_at < HOT_S
            if changes.wait(min(self.poll_s if hot else self.idle_s, deadline - now)):
                self._changed_at = self._now()

    def compact(self, keep_after: int) -> None:
        """Drop log entries at or below a revision; watchers from before it must resync."""
        def tx(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM log WHERE rev <= ?", (keep_after,))
                db.execute("UPDATE meta SET value=max(value, ?) WHERE name='compacted'",
                           (keep_after,))
                db.execute("COMMIT")
                self._writes += 1
            except BaseException:
                db.execute("ROLLBACK")
                raise
        self._run(tx)

    def close(self) -> None:
        """Close the database and the watches' inotify instances."""
        with self._lock:
            self._db.close()
        with self._notify_lock:
            _close_all(self._instances)


def _close_all(instances: list[DirChanges]) -> None:
    while instances:
        instances.pop().close()
