"""The embedded store: one SQLite file, nothing to run.

Table `kv` holds the current value of each key with the revision that wrote it; table `log`
holds every change (key, value or NULL, revision) so that `watch` can replay from any revision.
WAL mode lets the controller write while agents in other processes read. Watch polls the log
table (SQLite has no cross-process notification); `PRAGMA data_version` makes an idle poll one
cheap statement, so a 2 ms poll interval costs nothing while keeping change latency low.

The log is compacted as it grows: every `max_log_rows // 4` rows written, if it holds more than
`max_log_rows` rows, the oldest revisions are dropped so that the newest `max_log_rows // 2` rows
remain (whole revisions; `kv` always holds the latest value of every key). A watcher still at a
dropped revision gets `RevisionCompacted` and reads the whole state again, as with etcd.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Mapping

from crosszone.store.store import Event, RevisionCompacted, Store, StoreUnavailable

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL, rev INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS log (rev INTEGER NOT NULL, key TEXT NOT NULL, value BLOB);
CREATE INDEX IF NOT EXISTS log_rev ON log (rev);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('revision', 0);
INSERT OR IGNORE INTO meta VALUES ('compacted', 0);
"""


class SqliteStore(Store):
    """A Store in one SQLite file."""

    def __init__(self, path: str, poll_s: float = 0.002,
                 sleep: Callable[[float], None] = time.sleep,
                 now: Callable[[], float] = time.monotonic, max_log_rows: int = 20_000) -> None:
        self.path = path
        self.max_log_rows = max_log_rows
        self._rows_since = 0  # rows written since the last compaction check
        self.poll_s = poll_s
        self._sleep = sleep
        self._now = now
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
        """Poll the change log until an event under prefix after `after` shows up."""
        deadline = self._now() + timeout
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
            if self._now() >= deadline:
                return []
            self._sleep(self.poll_s)

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
        """Close the database."""
        with self._lock:
            self._db.close()
