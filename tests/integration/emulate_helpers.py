"""Helpers shared by the emulator's integration tests (probes, commands, counters)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from crosszone.linux import netns
from crosszone_lab.emulate import deploy, topology
from crosszone_lab.emulate import state as st


@contextlib.contextmanager
def deployed(spec: topology.TopologySpec, source: Path) -> Iterator[deploy.Deployment]:
    """`spec` up for the block, always taken down, even after a failure (a test's fixture)."""
    d = deploy.Deployment(topology.plan(spec), netns.Executor(), topology_path=str(source))
    try:
        d.up(log=lambda m: print(f"[up] {m}"))
        yield d
    finally:
        deploy.down(netns.Executor(), log=lambda m: print(f"[down] {m}"))


def kinds(dep: deploy.Deployment) -> list[str]:
    """Gateway kinds that can carry traffic in this deployment."""
    state = st.load()
    out = ["legacy"] if dep.plan.gateways_of("legacy") else []
    if state and any(state.fastpath.values()):
        out.append("crosszone")
    return out


def require(dep: deploy.Deployment, kind: str) -> None:
    """Fail (never skip, never fall back to another kind) when `kind` cannot carry traffic."""
    if kind not in kinds(dep):
        pytest.fail(f"{kind} gateways cannot carry traffic here (fast path not attached?)")


def sh(*argv: str, check: bool = True, timeout: float = 60) -> str:
    """Run a command, return stdout."""
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    if check and res.returncode != 0:
        raise AssertionError(f"{' '.join(argv)}: exit {res.returncode}: {res.stderr}")
    return res.stdout


def py_in(ns: str, script: str, timeout: float = 60) -> str:
    """Run a Python snippet inside namespace ns, return stdout."""
    return sh("ip", "netns", "exec", ns, sys.executable, "-c", textwrap.dedent(script),
              timeout=timeout)


PROBE = """
import http.client, json, time, socket
url_host, path, duration, interval = {host!r}, {path!r}, {duration}, {interval}
end = time.monotonic() + duration
ok = fail = 0
first_fail = last_fail = None
last_ok = time.monotonic(); max_gap = 0.0
while time.monotonic() < end:
    t = time.monotonic()
    try:
        # A new connection each time: a new source port, so a new ECMP hash on every hop.
        c = http.client.HTTPConnection(url_host, 80, timeout=0.3)
        c.request("GET", path); r = c.getresponse(); r.read(); c.close()
        if r.status != 200: raise OSError(r.status)
        now = time.monotonic(); max_gap = max(max_gap, now - last_ok); last_ok = now; ok += 1
    except (OSError, http.client.HTTPException, socket.timeout):
        fail += 1
        first_fail = first_fail or t
        last_fail = time.monotonic()
    time.sleep(max(0.0, interval - (time.monotonic() - t)))
max_gap = max(max_gap, time.monotonic() - last_ok)
# Failure window: from the start of the first failed attempt to the end of the last one.
window = (last_fail - first_fail) if first_fail else 0.0
print(json.dumps({{"ok": ok, "fail": fail, "max_gap_s": max_gap, "fail_window_s": window}}))
"""


def start_probe(ns: str, host: str, duration: float, interval: float = 0.01,
                path: str = "/meta/shard-00000.json") -> subprocess.Popen[str]:
    """Start a background HTTP probe (new connection every `interval`) inside ns."""
    script = PROBE.format(host=host, path=path, duration=duration, interval=interval)
    return subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def probe_result(proc: subprocess.Popen[str]) -> dict[str, float]:
    """Wait for a probe and parse its result."""
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    result: dict[str, float] = json.loads(out)
    return result


def c0_rx_packets(gw: topology.Gateway) -> int:
    """Packets received on a gateway's compute-facing interface."""
    data = json.loads(sh("ip", "-n", gw.ns, "-s", "-j", "link", "show", "c0"))
    return int(data[0]["stats64"]["rx"]["packets"])


UDP_ECHO = """
import socket, time
fam = socket.AF_INET6 if ":" in {addr!r} else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM); s.bind(({addr!r}, 9999)); s.settimeout(0.5)
# SO_RCVBUFFORCE (root): a descheduled echo process must not lose what the network delivered.
s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)
end = time.monotonic() + {duration}
while time.monotonic() < end:
    try:
        data, peer = s.recvfrom(2048)
    except socket.timeout:
        continue
    s.sendto(data, peer)
"""

UDP_PROBE = """
import json, select, socket, struct, time
addr, duration, interval, nsock = {addr!r}, {duration}, {interval}, 64
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
# 64 sockets, 64 source ports: 64 different ECMP hashes on every hop, in both directions.
socks = [socket.socket(fam, socket.SOCK_DGRAM) for _ in range(nsock)]
for s in socks:
    s.setblocking(False)
    s.setsockopt(socket.SOL_SOCKET, 33, 1 << 20)
sent = {{}}
got = set()
def drain(timeout):
    r, _, _ = select.select(socks, [], [], timeout)
    for s in r:
        while True:
            try:
                data = s.recv(2048)
            except BlockingIOError:
                break
            got.add(struct.unpack("!I", data[:4])[0])
t0 = time.monotonic(); seq = 0
while time.monotonic() - t0 < duration:
    sent[seq] = time.monotonic() - t0
    socks[seq % nsock].sendto(struct.pack("!I", seq) + b"x" * 60, (addr, 9999))
    seq += 1
    drain(interval)
end = time.monotonic() + 1.0
while time.monotonic() < end and len(got) < seq:
    drain(0.05)
lost = sorted(set(sent) - got)
print(json.dumps({{"sent": seq, "received": len(got & set(sent)), "lost": len(lost),
                  "lost_at_s": [round(sent[i], 3) for i in lost[:20]]}}))
"""


def udp_socket_drops(ns: str) -> int:
    """UDP datagrams a namespace's sockets dropped themselves (RcvbufErrors, /proc/net/snmp)."""
    lines = [ln.split() for ln in sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp")
             .splitlines() if ln.startswith("Udp:")]
    row = dict(zip(lines[0][1:], lines[1][1:], strict=True))
    return int(row.get("RcvbufErrors", 0))


class UdpProbe(tuple):  # type: ignore[type-arg]
    """(client, server) processes plus the namespaces whose socket drops are accounted."""

    namespaces: tuple[str, ...] = ()
    drops0: int = 0


def start_udp_probe(dep: deploy.Deployment, ep_index: int, duration: float,
                    interval: float = 0.002, family: int = 4) -> UdpProbe:
    """A UDP echo on storage node 1 and a sequence-numbered sender on an endpoint: every lost
    datagram is a packet lost by the network (no retransmission hides it); datagrams that the
    probe's own sockets dropped (a descheduled process) are reported apart."""
    node = dep.plan.storage_nodes[0]
    ep = dep.plan.endpoints[ep_index]
    namespaces = (node.ns, ep.ns)
    drops0 = sum(udp_socket_drops(ns) for ns in namespaces)
    addr = node.addr6 if family == 6 else node.addr
    server = subprocess.Popen(
        ["ip", "netns", "exec", node.ns, sys.executable, "-c",
         UDP_ECHO.format(addr=addr, duration=duration + 3)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    import time as _time
    _time.sleep(0.3)
    client = subprocess.Popen(
        ["ip", "netns", "exec", ep.ns, sys.executable, "-c",
         UDP_PROBE.format(addr=addr, duration=duration, interval=interval)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    probe = UdpProbe((client, server))
    probe.namespaces, probe.drops0 = namespaces, drops0
    return probe


def udp_probe_result(probe: UdpProbe) -> dict[str, object]:
    """Wait for a UDP probe; return its counts (`socket_drops`: lost in the probe's sockets)."""
    client, server = probe
    out, err = client.communicate(timeout=120)
    server.kill()
    server.wait()
    assert client.returncode == 0, err
    result: dict[str, object] = json.loads(out)
    result["socket_drops"] = sum(udp_socket_drops(ns) for ns in probe.namespaces) - probe.drops0
    return result


@contextlib.contextmanager
def busy_cpus() -> Iterator[None]:
    """A busy loop on every CPU (nice 10: it takes what the emulation leaves) for the block's
    duration, so that "nothing lost" is measured on a loaded box, not an idle one."""
    procs = [subprocess.Popen(["taskset", "-c", str(cpu), "nice", "-n", "10", sys.executable,
                               "-c", "while True: pass"])
             for cpu in sorted(os.sched_getaffinity(0))]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
