"""A private etcd for tests: 127.0.0.1, random free ports, a tmp data dir; stopped afterwards."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def etcd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Client URL of a running private etcd (skips if /usr/bin/etcd is missing)."""
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    data = Path(tmp_path_factory.mktemp("etcd"))
    client, peer = _free_port(), _free_port()
    url = f"http://127.0.0.1:{client}"
    log = open(data / "etcd.log", "w")  # noqa: SIM115  (closed in finally, after etcd)
    proc = subprocess.Popen(
        [binary, "--data-dir", str(data / "data"), "--name", "test",
         "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"test=http://127.0.0.1:{peer}",
         "--max-request-bytes", str(64 << 20), "--max-txn-ops", "100000"],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"etcd did not start: {(data / 'etcd.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
