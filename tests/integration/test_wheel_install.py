"""The one wheel, installed as a gateway host installs it (issue 24, "Done when").

Builds the wheel from this checkout (its build compiles the product's BPF objects with the
Makefile's rules), installs it into a fresh virtual environment in a temporary directory, and
runs it from there: no repository on sys.path, no build/. There:

- `pip show` finds no scapy, matplotlib or selenium; the package loads its objects from itself;
- `crosszone check` passes on the example intents; a lab command says "install crosszone[lab]";
- the packaged gateway object has no benchmark or test map or section (BTF and section headers);
- the agent, with only the capabilities of packaging/systemd/crosszone-agent@.service, attaches
  the packaged program to veth pairs in a namespace this test creates and programs it from a
  SQLite store; a frame is forwarded as the reference model says; after SIGTERM (the unit's stop)
  the fast path forwards on; everything is removed afterwards;
- the same wheel with the `lab` extra runs `crosszone demo --quick`.

Installing needs the package index (or pip's cache) for the dependencies.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from crosszone.compile.encode import bind_ports
from crosszone.compile.tables import compile_tables
from crosszone.control.service import Controller
from crosszone.fastpath import deploy
from crosszone.fastpath.testing import model
from crosszone.intent.cluster import load_cluster
from crosszone.linux.netns import in_netns
from crosszone.store.sqlite_store import SqliteStore

from packet_fixtures import EXAMPLE, vxlan
from systemd_units import AGENT_UNIT, capabilities
from veth_topology import MACS, sh

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ETH_P_ALL = 0x0003
MAGIC = b"CZWHEEL:"
#: Maps and sections only benchmark or test builds have (bpf/bench_*.h, bpf/test_clock.h).
NOT_IN_PRODUCT = ("bench_save", "bench_seq", "test_clock", "routes4_lpm", "routes6_lpm")


def _run(*args: str | Path, cwd: Path, check: bool = True,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run outside the tree: cwd a temporary directory, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, check=False, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(the wheel, the fresh venv's bin directory, a work directory outside the tree)."""
    if os.geteuid() != 0:
        pytest.skip("the installed agent attaches XDP programs and builds namespaces: root")
    base = tmp_path_factory.mktemp("wheel")
    dist, work = base / "dist", base / "work"
    work.mkdir()
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, ROOT, cwd=work)
    wheel = next(dist.glob("crosszone-*.whl"))
    python = getattr(sys, "_base_executable", None) or shutil.which("python3") or "python3"
    _run(python, "-m", "venv", base / "venv", cwd=work)
    bin_dir = base / "venv" / "bin"
    _run(bin_dir / "pip", "install", "-q", wheel, cwd=work)
    try:
        yield wheel, bin_dir, work
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_product_installs_alone_and_runs_from_the_package(installed) -> None:
    _wheel, bin_dir, work = installed
    for name in ("scapy", "matplotlib", "selenium"):
        done = _run(bin_dir / "pip", "show", name, cwd=work, check=False)
        assert done.returncode != 0, f"{name} installed with the product:\n{done.stdout}"
    where = json.loads(_run(bin_dir / "python", "-c", (
        "import json, sys, crosszone, crosszone.abi.objects as o\n"
        "print(json.dumps({'file': crosszone.__file__, 'objects': str(o.BUILD_DIR),\n"
        "                  'checkout': o.is_checkout(), 'path': sys.path}))"), cwd=work).stdout)
    venv = str(bin_dir.parent)
    assert where["file"].startswith(venv) and where["objects"].startswith(venv), where
    assert not where["checkout"], where
    assert not any(p.startswith(str(ROOT)) for p in where["path"]), where["path"]
    assert (Path(where["objects"]) / "xdp_gateway.o").is_file()
    for intent in ("gateway.yaml", "cluster.yaml"):
        _run(bin_dir / "crosszone", "check", ROOT / "examples" / intent, cwd=work)
    done = _run(bin_dir / "crosszone", "demo", "--quick", cwd=work, check=False)
    assert done.returncode == 2 and "install crosszone[lab]" in done.stderr, done


def test_the_wheel_holds_objects_and_units_not_sources(installed) -> None:
    names = set(zipfile.ZipFile(installed[0]).namelist())
    assert {"crosszone/bpf_objects/xdp_gateway.o", "crosszone/bpf_objects/xdp_pass.o",
            "crosszone/systemd/crosszone-agent@.service",
            "crosszone/systemd/crosszone-controller.service",
            "crosszone_lab/examples/gateway.yaml"} <= names
    assert not [n for n in names if n.endswith((".c", ".h"))]
    assert sorted(n for n in names if n.endswith(".o")) == sorted(
        ["crosszone/bpf_objects/xdp_gateway.o", "crosszone/bpf_objects/xdp_pass.o"])


def test_the_packaged_object_has_no_benchmark_or_test_hook(installed) -> None:
    _wheel, bin_dir, work = installed
    obj = next(bin_dir.parent.glob("lib/python*/site-packages/crosszone/bpf_objects/"
                                   "xdp_gateway.o"))
    btf = _run("bpftool", "btf", "dump", "file", obj, cwd=work).stdout
    sections = _run("llvm-objdump", "-h", obj, cwd=work).stdout
    assert "'route4_slots'" in btf and "'config'" in btf, "not the gateway's BTF"
    for name in NOT_IN_PRODUCT:
        assert f"'{name}'" not in btf, f"{name} in the packaged program"
    names = [line.split()[1] for line in sections.splitlines()[5:] if len(line.split()) > 1]
    assert "xdp.frags" in names and not [n for n in names if "bench" in n or "test" in n], names


@contextlib.contextmanager
def _bpffs(path: Path) -> Iterator[Path]:
    """A private BPF filesystem: `ip netns exec` mounts a fresh /sys, hiding /sys/fs/bpf."""
    path.mkdir()
    subprocess.run(["mount", "-t", "bpf", "bpf", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def _frame() -> bytes:
    """A host -> storage VXLAN frame of the example intent, marked so the receiver knows it."""
    return bytes(vxlan(IP(src="192.168.1.10", dst="172.16.5.5")
                       / UDP(sport=40000, dport=80) / Raw(MAGIC + b"p" * 64)))


def _forward(ns: dict[str, str], frame: bytes, timeout: float = 5.0) -> bytes | None:
    """Send `frame` from h0 until one arrives on st0 (None if none did in `timeout`)."""
    with in_netns(ns["st"]):
        rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        rx.bind(("st0", 0))
    with in_netns(ns["h"]):
        tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        tx.bind(("h0", 0))
    rx.settimeout(0.2)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            tx.send(frame)
            with contextlib.suppress(TimeoutError):
                data, addr = rx.recvfrom(65535)
                if addr[2] != socket.PACKET_OUTGOING and MAGIC in data:
                    return data
        return None
    finally:
        rx.close()
        tx.close()


def _expected(intent: Path, netns: str, frame: bytes) -> bytes:
    with in_netns(netns):
        bound = bind_ports(compile_tables(load_cluster(intent), "gw-a"), socket.if_nametoindex)
        ingress = socket.if_nametoindex("c0")
    out = model.process(frame, bound, ingress).data
    assert out is not None
    return out


@contextlib.contextmanager
def _one_namespace(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The gateway's ports c0 and s0 in one new namespace, their veth peers h0 and st0 beside
    them (peers in other namespaces would make the agent enter those to attach XDP_PASS, which
    takes CAP_SYS_ADMIN: an emulator's need, not a NIC's). Yields the namespace and the intent."""
    name = f"czwh-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        sh("ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        for dev, peer in (("c0", "h0"), ("s0", "st0")):
            sh("ip", "-n", name, "link", "add", dev, "type", "veth", "peer", "name", peer)
        for dev in ("c0", "s0", "h0", "st0"):
            sh("ip", "-n", name, "link", "set", dev, "address", MACS[dev], "promisc", "on", "up")
        intent = tmp_path / "gw.yaml"
        intent.write_text(EXAMPLE.read_text().replace("compute0", "c0").replace("storage0", "s0"))
        yield name, intent
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)  # its devices and XDP too


def test_the_installed_agent_forwards_with_the_units_capabilities(installed,
                                                                   tmp_path: Path) -> None:
    _wheel, bin_dir, work = installed
    caps = ",".join(["-all", *(f"+{c}" for c in capabilities(AGENT_UNIT))])
    with _bpffs(tmp_path / "bpffs") as bpffs, _one_namespace(tmp_path) as (name, intent):
        ns = {"gw": name, "h": name, "st": name}
        pin = bpffs / "gw-a"
        db, log, state = tmp_path / "state.db", tmp_path / "agent.log", tmp_path / "agent.json"
        Controller(SqliteStore(str(db))).apply(intent.read_text(), source=str(intent))
        # The agent runs inside the namespace (as on a host, no --netns) with exactly the unit's
        # capabilities (CapabilityBoundingSet = AmbientCapabilities, NoNewPrivileges).
        agent = subprocess.Popen(
            ["ip", "netns", "exec", name, "setpriv", f"--bounding-set={caps}",
             f"--inh-caps={caps}", f"--ambient-caps={caps}", "--no-new-privs",
             str(bin_dir / "crosszone"), "agent", "--gateway", "gw-a", "--store",
             f"sqlite://{db}", "--pin-dir", str(pin), "--state-file", str(state),
             "--metrics", "", "--no-routing"],
            cwd=work, stdout=subprocess.DEVNULL, stderr=log.open("wb"))
        try:
            deadline = time.monotonic() + 60
            while not (state.exists() and json.loads(state.read_text()).get("last")):
                assert agent.poll() is None, f"agent exited:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"agent never applied:\n{log.read_text()}"
                time.sleep(0.1)
            frame = _frame()
            got = _forward(ns, frame)
            assert got is not None, f"no frame forwarded:\n{log.read_text()}"
            assert got == _expected(intent, name, frame)
            agent.send_signal(signal.SIGTERM)  # the unit's stop
            agent.wait(20)
            assert _forward(ns, frame) == got, "the fast path stopped with the agent"
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait(10)
            deploy.detach(pin)  # its record under /run/crosszone/fastpath


def test_the_same_wheel_with_the_lab_runs_the_quick_demo(installed) -> None:
    wheel, bin_dir, work = installed
    _run(bin_dir / "pip", "install", "-q", f"{wheel}[lab]", cwd=work)
    assert _run(bin_dir / "pip", "show", "scapy", cwd=work, check=False).returncode == 0
    done = _run(bin_dir / "crosszone", "demo", "--quick", cwd=work, check=False, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "part 1" not in done.stdout, done.stdout  # no part failed or was skipped
