"""The state store: one interface, two backends (SQLite file, etcd).

The store is a revisioned key-value map. Every write is one transaction that gets one revision,
strictly increasing; `watch` returns the events after a revision in revision order, so an agent
that records the last revision it applied can resume exactly where it stopped.

Keys under `intent/` hold the desired state (see `crosszone.store.objects`); keys under
`status/` hold what each agent reports. URLs: `sqlite:///path/file.db` (the default: nothing to
run), `etcd://host:port` (plain http) and `etcds://host:port` (https); a cluster lists its
members, `etcd://h1:2379,h2:2379,h3:2379`, and the store fails over between them (see
`crosszone.store.etcd_store`). An etcd with
authentication takes a user in the URL, `etcd://user@host:port`; its password never goes in a
URL or on a command line (both show in `ps`): it comes from CROSSZONE_ETCD_PASSWORD or the file
named by CROSSZONE_ETCD_PASSWORD_FILE. For https, CROSSZONE_ETCD_CA names the CA bundle that
signs the server's certificate, CROSSZONE_ETCD_CERT and CROSSZONE_ETCD_KEY a client certificate.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass

INTENT = "intent/"
STATUS = "status/"


class StoreUnavailable(OSError):
    """The store cannot be reached (the agent keeps its last state and retries)."""


class StoreAuthError(StoreUnavailable):
    """The store refused our credentials, or wants some (a configuration error, not an outage)."""


class RevisionCompacted(StoreUnavailable):
    """A watch asked for revisions the store no longer keeps (its log was compacted): the
    caller reads the whole state again (`get_prefix`) and watches from that revision."""

    def __init__(self, asked: int, oldest: int) -> None:
        super().__init__(f"revision {asked} is compacted (the log starts after {oldest}): "
                         "read the whole state again")
        self.asked, self.oldest = asked, oldest


@dataclass(frozen=True)
class Event:
    """One key changed at a revision (value None: deleted)."""

    revision: int
    key: str
    value: bytes | None


class Store(ABC):
    """A revisioned key-value store with watch."""

    @abstractmethod
    def put_many(self, items: Mapping[str, bytes | None]) -> int:
        """Write (None = delete) all items in one transaction; return its revision."""

    @abstractmethod
    def get_prefix(self, prefix: str) -> tuple[dict[str, bytes], int]:
        """All keys under prefix and the store revision they were read at."""

    @abstractmethod
    def watch(self, prefix: str, after: int, timeout: float) -> list[Event]:
        """Events under prefix with revision > after, waiting up to timeout for the first."""

    @abstractmethod
    def revision(self) -> int:
        """The current store revision."""

    def close(self) -> None:  # noqa: B027  (optional hook: most backends hold nothing)
        """Release connections."""

    def put(self, key: str, value: bytes) -> int:
        """Write one key."""
        return self.put_many({key: value})

    def get(self, key: str) -> bytes | None:
        """One key's value (None if absent)."""
        items, _ = self.get_prefix(key)
        return items.get(key)

    def get_versioned(self, key: str) -> tuple[bytes | None, int]:
        """One key's value and the revision that last wrote it (None, 0: absent): what
        `put_if` compares against."""
        raise NotImplementedError(f"{type(self).__name__} has no compare-and-swap")

    def put_if(self, key: str, value: bytes | None, revision: int) -> int | None:
        """Write `value` (None: delete) to `key` only while the revision that last wrote the key
        is still `revision` (0: only while the key is absent); the write's revision, or None
        when another writer changed the key first (nothing written). Two writers that read the
        same revision cannot both succeed."""
        raise NotImplementedError(f"{type(self).__name__} has no compare-and-swap")


def open_store(url: str, env: Mapping[str, str] | None = None) -> Store:
    """A store from its URL: sqlite:///path.db, etcd://[user@]host:port[,host:port...] or
    etcds://...

    env (default os.environ) supplies the etcd password and TLS files (see the module doc)."""
    if url.startswith("sqlite://"):
        from crosszone.store.sqlite_store import SqliteStore

        return SqliteStore(url.removeprefix("sqlite://"))
    if url.startswith(("etcd://", "etcds://")):
        from crosszone.store.etcd_store import etcd_from_url

        return etcd_from_url(url, os.environ if env is None else env)
    raise ValueError(f"unknown store URL {url!r} (sqlite:///path.db or etcd://host:port)")
