"""Private etcds for tests: 127.0.0.1, random free ports, a tmp data dir; stopped afterwards.

`etcd_url`: plain, no authentication. `etcd_auth`: authentication enabled (a root user with a
random password). `etcd_tls`: https with a private CA, client certificates required, and
authentication too (certificates made with the openssl command). `etcd_cluster`: three members,
a fresh cluster per test (tests kill members), each member with its own data dir, all removed
afterwards.
"""

from __future__ import annotations

import secrets
import shutil
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pytest

from crosszone_lab import local_etcd


@dataclass(frozen=True)
class EtcdServer:
    """A running private etcd: its client URL and, with auth enabled, root's password."""

    url: str
    password: str | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


def _binary() -> None:
    try:
        local_etcd.binary()
    except local_etcd.EtcdStartError as exc:
        pytest.skip(str(exc))


def _wait_healthy(url: str, procs: list[subprocess.Popen], logs: list[Path],
                  kw: dict | None = None) -> None:
    """Until url/health answers 200; pytest.fail with the members' logs if not."""
    try:
        local_etcd.wait_healthy(url, procs, logs, kw)
    except local_etcd.EtcdStartError as exc:
        pytest.fail(str(exc))


def _start(data: Path, tls: dict[str, Path] | None = None) -> tuple[subprocess.Popen, str, IO[str]]:
    _binary()
    extra = []
    if tls:
        extra = ["--cert-file", str(tls["cert"]), "--key-file", str(tls["key"]),
                 "--trusted-ca-file", str(tls["ca"]), "--client-cert-auth"]
    kw = {}
    if tls:
        ctx = ssl.create_default_context(cafile=str(tls["ca"]))
        ctx.load_cert_chain(str(tls["client"]), str(tls["client_key"]))
        kw = {"verify": ctx}
    try:
        return local_etcd.start_single(data, extra, "https" if tls else "http", kw)
    except local_etcd.EtcdStartError as exc:
        pytest.fail(str(exc))


_stop = local_etcd.stop


def _enable_auth(url: str, tls: dict[str, Path] | None) -> str:
    """Add root with a random password, give it the root role, enable authentication."""
    password = secrets.token_urlsafe(16)
    ctl = ["etcdctl", "--endpoints", url]
    if tls:
        ctl += ["--cacert", str(tls["ca"]), "--cert", str(tls["client"]),
                "--key", str(tls["client_key"])]
    for args in (["user", "add", "root", "--new-user-password", password],
                 ["user", "grant-role", "root", "root"], ["auth", "enable"]):
        r = subprocess.run(ctl + args, capture_output=True, text=True, timeout=30)
        if r.returncode != 0 and "already" not in r.stderr:
            pytest.fail(f"etcdctl {' '.join(args[:2])}: {r.stderr}")
    return password


def _certificates(d: Path) -> dict[str, Path]:
    """A private CA, a server certificate for 127.0.0.1 and a client certificate."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.pem")
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,"
                               "clientAuth\n")
    # etcd 3.4's JSON gateway refuses a client certificate with a CommonName (it would be
    # taken for the user: "CommonName of client sending a request against gateway will be
    # ignored"), so the client's has none; the user comes from the password.
    for name, subj in (("server", "/CN=server"), ("client", "/O=crosszone-client")):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", subj,
            "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "san.cnf", "-out", f"{name}.pem")
    return {"ca": d / "ca.pem", "cert": d / "server.pem", "key": d / "server.key",
            "client": d / "client.pem", "client_key": d / "client.key"}


@pytest.fixture(scope="session")
def etcd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Client URL of a running private etcd (skips if /usr/bin/etcd is missing)."""
    proc, url, log = _start(Path(tmp_path_factory.mktemp("etcd")))
    try:
        yield url
    finally:
        _stop(proc, log)


@pytest.fixture(scope="session")
def etcd_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A private etcd with authentication enabled (user root, password in the result)."""
    proc, url, log = _start(Path(tmp_path_factory.mktemp("etcd-auth")))
    try:
        yield EtcdServer(url, _enable_auth(url, None))
    finally:
        _stop(proc, log)


@pytest.fixture(scope="session")
def etcd_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A private etcd over https that requires a client certificate, with authentication."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = Path(tmp_path_factory.mktemp("etcd-tls"))
    tls = _certificates(d)
    proc, url, log = _start(d, tls)
    try:
        yield EtcdServer(url, _enable_auth(url, tls), tls["ca"], tls["client"],
                         tls["client_key"])
    finally:
        _stop(proc, log)


@dataclass
class EtcdCluster:
    """A private etcd cluster of several members on 127.0.0.1 (plain http, no auth)."""

    data: Path
    names: list[str]
    urls: list[str]                  # client URLs, http://127.0.0.1:PORT
    procs: list[subprocess.Popen]
    logs: list[IO[str]]

    @property
    def store_url(self) -> str:
        """etcd://127.0.0.1:P1,127.0.0.1:P2,... (every member)."""
        return "etcd://" + ",".join(u.split("://", 1)[1] for u in self.urls)

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.poll() is None]

    def leader(self, seconds: float = 20) -> int:
        """The index of the member the live members agree leads (waits for an election)."""
        deadline = time.monotonic() + seconds
        while True:
            ids, leaders = {}, set()
            for i in self.alive():
                try:
                    st = httpx.post(self.urls[i] + "/v3/maintenance/status", json={},
                                    timeout=1).json()
                    ids[st["header"]["member_id"]] = i
                    leaders.add(st.get("leader"))
                except (httpx.HTTPError, ValueError, KeyError):
                    leaders.add(None)
            if len(leaders) == 1 and next(iter(leaders)) in ids:
                return ids[leaders.pop()]
            if time.monotonic() > deadline:
                pytest.fail(f"no agreed etcd leader in {seconds} s: {leaders}, {ids}")
            time.sleep(0.05)

    def kill(self, i: int) -> None:
        """SIGKILL member i (no clean shutdown: what a crashed host looks like to the rest)."""
        self.procs[i].kill()
        self.procs[i].wait(10)

    def stop(self) -> None:
        for proc, log in zip(self.procs, self.logs):
            _stop(proc, log)
        shutil.rmtree(self.data, ignore_errors=True)


def start_cluster(data: Path, size: int = 3) -> EtcdCluster:
    """Start `size` members at once (they wait for each other) and wait until each is healthy."""
    _binary()
    names = [f"m{i}" for i in range(size)]
    clients = [f"http://127.0.0.1:{local_etcd.free_port()}" for _ in names]
    peers = [f"http://127.0.0.1:{local_etcd.free_port()}" for _ in names]
    initial = ",".join(f"{n}={p}" for n, p in zip(names, peers))
    token = ["--initial-cluster-token", f"cz-{secrets.token_hex(4)}"]
    started = [local_etcd.start_member(data, n, c, p, initial, token)
               for n, c, p in zip(names, clients, peers)]
    cluster = EtcdCluster(data, names, clients, [s[0] for s in started], [s[1] for s in started])
    try:
        for url in clients:
            _wait_healthy(url, cluster.procs, [data / f"{n}.log" for n in names])
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    """A fresh three-member etcd cluster (tests kill members); stopped and removed after."""
    cluster = start_cluster(Path(tmp_path_factory.mktemp("etcd-cluster")))
    try:
        yield cluster
    finally:
        cluster.stop()
