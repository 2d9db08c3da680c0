"""Private etcds for tests: 127.0.0.1, random free ports, a tmp data dir; stopped afterwards.

`etcd_url`: plain, no authentication. `etcd_auth`: authentication enabled (a root user with a
random password). `etcd_tls`: https with a private CA, client certificates required, and
authentication too (certificates made with the openssl command).
"""

from __future__ import annotations

import secrets
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class EtcdServer:
    """A running private etcd: its client URL and, with auth enabled, root's password."""

    url: str
    password: str | None = None
    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


def _start(data: Path, tls: dict[str, Path] | None = None) -> tuple[subprocess.Popen, str, object]:
    binary = shutil.which("etcd")
    if binary is None:
        pytest.skip("etcd is not installed (Debian: etcd-server)")
    client, peer = _free_port(), _free_port()
    url = f"{'https' if tls else 'http'}://127.0.0.1:{client}"
    extra = []
    if tls:
        extra = ["--cert-file", str(tls["cert"]), "--key-file", str(tls["key"]),
                 "--trusted-ca-file", str(tls["ca"]), "--client-cert-auth"]
    log = open(data / "etcd.log", "w")  # noqa: SIM115  (closed in _stop, after etcd)
    proc = subprocess.Popen(
        [binary, "--data-dir", str(data / "data"), "--name", "test",
         "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"test=http://127.0.0.1:{peer}",
         "--max-request-bytes", str(64 << 20), "--max-txn-ops", "100000", *extra],
        stdout=log, stderr=subprocess.STDOUT)
    kw = {}
    if tls:
        ctx = ssl.create_default_context(cafile=str(tls["ca"]))
        ctx.load_cert_chain(str(tls["client"]), str(tls["client_key"]))
        kw = {"verify": ctx}
    deadline = time.monotonic() + 20
    while True:
        try:
            if httpx.get(url + "/health", timeout=1, **kw).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            _stop(proc, log)
            pytest.fail(f"etcd did not start: {(data / 'etcd.log').read_text()[-2000:]}")
        time.sleep(0.1)
    return proc, url, log


def _stop(proc: subprocess.Popen, log: object) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    log.close()  # type: ignore[attr-defined]


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
