"""`crosszone probe` between real namespaces: a probe host, a forwarding hop that stands for the
gateways, and a storage node serving the known document over IPv4 and IPv6. The probe's reports
reach the store, a broken hop shows as failed reads in the runner's reading (ProbeWatch), a
repaired one as clean reads again, and SIGTERM ends the daemon with a last `stopped` report.

    probe ns (p0) ---- hop ns (hp | hs) ---- storage ns (s0)
    10.71.1.2          10.71.1.1 10.71.2.1    10.71.2.2
    fd71:1::2          fd71:1::1 fd71:2::1    fd71:2::2
"""

from __future__ import annotations

import hashlib
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from crosszone.probe.report import ProbeReport, ProbeWatch, RoleReading, key
from crosszone.store.sqlite_store import SqliteStore

ROOT = Path(__file__).resolve().parents[2]
DOC = b'{"shard": 0, "rows": [' + b"1, " * 2000 + b"1]}\n"


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)


@pytest.fixture
def namespaces() -> Iterator[dict[str, str]]:
    tag = secrets.token_hex(3)
    ns = {r: f"czpr-{tag}-{r}" for r in ("p", "hop", "st")}
    try:
        for name in ns.values():
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        sh("ip", "-n", ns["hop"], "link", "add", "hp", "type", "veth", "peer", "name", "p0",
           "netns", ns["p"])
        sh("ip", "-n", ns["hop"], "link", "add", "hs", "type", "veth", "peer", "name", "s0",
           "netns", ns["st"])
        for where, dev, a4, a6 in (("p", "p0", "10.71.1.2/24", "fd71:1::2/64"),
                                   ("hop", "hp", "10.71.1.1/24", "fd71:1::1/64"),
                                   ("hop", "hs", "10.71.2.1/24", "fd71:2::1/64"),
                                   ("st", "s0", "10.71.2.2/24", "fd71:2::2/64")):
            sh("ip", "-n", ns[where], "addr", "add", a4, "dev", dev)
            sh("ip", "-n", ns[where], "-6", "addr", "add", a6, "dev", dev, "nodad")
            sh("ip", "-n", ns[where], "link", "set", dev, "up")
        sh("ip", "netns", "exec", ns["hop"], "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sh("ip", "netns", "exec", ns["hop"], "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        for where, v4, v6 in (("p", "10.71.1.1", "fd71:1::1"), ("st", "10.71.2.1", "fd71:2::1")):
            sh("ip", "-n", ns[where], "route", "add", "default", "via", v4)
            sh("ip", "-n", ns[where], "-6", "route", "add", "default", "via", v6)
        yield ns
    finally:
        for name in ns.values():
            out = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
            for pid in out.stdout.split():
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _wait(what: str, cond: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_probe_reports_reads_across_namespaces_and_stops_on_sigterm(
        namespaces: dict[str, str], tmp_path: Path) -> None:
    ns = namespaces
    docs = tmp_path / "www" / "meta"
    docs.mkdir(parents=True)
    (docs / "shard-00000.json").write_bytes(DOC)
    cfg = tmp_path / "probe.yaml"
    cfg.write_text(
        "name: prod-h1\nrole: production\ninterval_s: 0.3\nconnect_s: 0.5\nresponse_s: 2\n"
        "targets:\n  - name: storage-1\n    addresses: [10.71.2.2, 'fd71:2::2']\n"
        f"    path: /meta/shard-00000.json\n    size: {len(DOC)}\n"
        f"    sha256: {hashlib.sha256(DOC).hexdigest()}\n")
    db = tmp_path / "s.db"
    server = subprocess.Popen(["ip", "netns", "exec", ns["st"], sys.executable, "-m",
                               "http.server", "--bind", "::", "80"],
                              cwd=tmp_path / "www", stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    probe = subprocess.Popen(["ip", "netns", "exec", ns["p"], sys.executable, "-m",
                              "crosszone.cli", "probe", "--config", str(cfg), "--store",
                              f"sqlite://{db}"], cwd=ROOT, stderr=subprocess.PIPE)
    store = SqliteStore(str(db))
    watch = ProbeWatch(store)
    try:
        _wait("the probe's first report", lambda: store.get(key("prod-h1")) is not None)
        watch.read("production", time.time())  # from here on, what happens next

        def clean() -> ProbeReport:
            raw = store.get(key("prod-h1"))
            assert raw is not None
            return ProbeReport.from_json(raw)

        _wait("a round with both families good",
              lambda: all(v.ok for v in clean().verdicts))
        r = clean()
        assert {(v.family, v.ok, v.bytes) for v in r.verdicts} == {(4, True, len(DOC)),
                                                                     (6, True, len(DOC))}
        watch.read("production", time.time())

        # the hop stops forwarding to the node (unreachable routes, as a gateway that lost its
        # storage-side route): both families fail, in the connect phase
        sh("ip", "-n", ns["hop"], "route", "add", "unreachable", "10.71.2.2/32")
        sh("ip", "-n", ns["hop"], "-6", "route", "add", "unreachable", "fd71:2::2/128")
        seen: list[RoleReading] = []

        def failing() -> bool:
            seen.append(watch.read("production", time.time()))
            return sum(x.failed for x in seen) >= 4

        _wait("failed reads while the hop is down", failing)
        messages = [m for x in seen for m in x.messages]
        assert any("10.71.2.2: connect:" in m for m in messages), messages
        assert any("fd71:2::2: connect:" in m for m in messages), messages
        assert all(x.stale == () for x in seen)

        # repaired: the reads come back clean
        sh("ip", "-n", ns["hop"], "route", "del", "unreachable", "10.71.2.2/32")
        sh("ip", "-n", ns["hop"], "-6", "route", "del", "unreachable", "fd71:2::2/128")
        _wait("a clean round after the repair",
              lambda: clean().verdicts and all(v.ok for v in clean().verdicts))
        watch.read("production", time.time())
        before = clean().rounds
        _wait("two more rounds", lambda: clean().rounds >= before + 2)
        after = watch.read("production", time.time())
        assert after.failed == 0 and after.reads >= 4 and after.p99_ms > 0

        probe.send_signal(signal.SIGTERM)
        _, err = probe.communicate(timeout=15)
        assert probe.returncode == 0, err.decode()
        last = clean()
        assert last.stopped and last.errors >= 4
        assert watch.read("production", time.time()).stale == ("prod-h1",)
    finally:
        store.close()
        for proc in (probe, server):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
