"""Fixtures shared by unit test modules."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from crosszone.store.store import Store, open_store
from etcd_fixture import etcd_url  # noqa: F401  (fixture: any_store's etcd)


@pytest.fixture(params=["sqlite", "etcd"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each store backend in turn: a fresh SQLite file, then a fresh root on the session's etcd."""
    if request.param == "sqlite":
        s = open_store(f"sqlite://{tmp_path}/state.db")
    else:
        from crosszone.store.etcd_store import EtcdStore

        s = EtcdStore(request.getfixturevalue("etcd_url"), root=f"/t{time.monotonic_ns()}/")
    yield s
    s.close()
