"""Private etcd members on 127.0.0.1: start, wait until healthy, stop.

For benchmarks and tests that need a real etcd next to the code under test (random free ports,
a data directory of the caller's, the member's output in NAME.log beside its data). Production
runs its own etcd; nothing here is used to serve one.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import httpx


class EtcdStartError(RuntimeError):
    """An etcd member did not start (not installed, exited, or not healthy in time)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the time of the call."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary() -> str:
    """The etcd executable (EtcdStartError when it is not installed)."""
    found = shutil.which("etcd")
    if found is None:
        raise EtcdStartError("etcd is not installed (Debian: etcd-server)")
    return found


def start_member(data: Path, name: str, url: str, peer: str, cluster: str,
                 extra: Sequence[str] = (), max_request_bytes: int = 64 << 20
                 ) -> tuple[subprocess.Popen[bytes], IO[str]]:
    """Start one member: data in data/NAME, output in data/NAME.log (returned open; `stop`
    closes it after the process)."""
    log = open(data / f"{name}.log", "w")  # noqa: SIM115  (closed in stop, after etcd)
    try:
        proc = subprocess.Popen(
            [binary(), "--data-dir", str(data / name), "--name", name,
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", cluster, "--initial-cluster-state", "new",
             "--max-request-bytes", str(max_request_bytes), "--max-txn-ops", "100000",
             *extra],
            stdout=log, stderr=subprocess.STDOUT)
    except BaseException:
        log.close()
        raise
    return proc, log


def wait_healthy(url: str, procs: Sequence[subprocess.Popen[bytes]], logs: Sequence[Path],
                 client_kw: dict[str, Any] | None = None, seconds: float = 20) -> None:
    """Until url/health answers 200 (a leader is known). EtcdStartError, with the end of every
    member's log, when a member exits or `seconds` pass."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url + "/health", timeout=1, **(client_kw or {})).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        exited = any(p.poll() is not None for p in procs)
        if exited or time.monotonic() > deadline:
            why = "a member exited" if exited else f"not healthy after {seconds:.0f} s"
            tails = "\n".join(f"{f.name}: {_tail(f)}" for f in logs)
            raise EtcdStartError(f"etcd at {url} did not start ({why}):\n{tails}")
        time.sleep(0.1)


def _tail(path: Path, chars: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError as exc:
        return f"(no log: {exc})"


def stop(proc: subprocess.Popen[bytes], log: IO[str] | None = None) -> None:
    """Terminate a member (kill after 10 s), then close its log."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    if log is not None:
        log.close()


def start_single(data: Path, extra: Sequence[str] = (), scheme: str = "http",
                 client_kw: dict[str, Any] | None = None, max_request_bytes: int = 64 << 20
                 ) -> tuple[subprocess.Popen[bytes], str, IO[str]]:
    """A one-member etcd on free ports, healthy; returns (process, client URL, log)."""
    url = f"{scheme}://127.0.0.1:{free_port()}"
    peer = f"http://127.0.0.1:{free_port()}"
    proc, log = start_member(data, "default", url, peer, f"default={peer}", extra,
                             max_request_bytes)
    try:
        wait_healthy(url, [proc], [data / "default.log"], client_kw)
    except BaseException:
        stop(proc, log)
        raise
    return proc, url, log
