"""Private etcd members for benchmarks and tests: a start that fails says why, with the log."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from crosszone_lab import local_etcd

pytestmark = pytest.mark.skipif(shutil.which("etcd") is None,
                                reason="etcd is not installed (Debian: etcd-server)")


def test_a_member_starts_answers_and_stops(tmp_path: Path) -> None:
    proc, url, log = local_etcd.start_single(tmp_path)
    try:
        assert httpx.get(url + "/health", timeout=5).status_code == 200
    finally:
        local_etcd.stop(proc, log)
    assert proc.poll() is not None and log.closed
    assert (tmp_path / "default.log").stat().st_size > 0


def test_a_member_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    with pytest.raises(local_etcd.EtcdStartError, match="exited") as err:
        local_etcd.start_single(tmp_path, ["--no-such-flag"])
    assert "no-such-flag" in str(err.value)  # etcd's own complaint, from its log


def test_a_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(local_etcd.EtcdStartError, match="etcd-server"):
        local_etcd.start_single(tmp_path)
