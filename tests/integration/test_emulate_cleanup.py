"""`emulate down` leaves nothing behind: no namespace, link, pin, XDP program or process.

This module brings its own deployment up and takes it down inside the test (the `deployment`
fixture would take it down only after the test), recording first what exists, so that anything
the deployment made and `down` missed is named in the failure.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from emulate_helpers import sh

from crosszone.linux import netns
from crosszone.linux import pids as pids_mod
from crosszone_lab.emulate import deploy, topology
from crosszone_lab.emulate import state as st

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "examples" / "emulate-small.yaml"
MARKERS = (str(topology.RUN_DIR), topology.PREFIX)


def _root_links() -> set[str]:
    return {link["ifname"] for link in json.loads(sh("ip", "-j", "link", "show"))}


def _our_processes() -> dict[int, str]:
    """Processes whose command line names the emulator's run directory or a czemu- namespace."""
    found = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd for m in MARKERS) and "pytest" not in cmd:
            found[int(d.name)] = cmd.strip()
    return found


def _prog_exists(prog_id: int) -> bool:
    res = os.system(f"bpftool prog show id {prog_id} >/dev/null 2>&1")
    return res == 0


def _xdp_prog_ids(p: topology.Plan) -> set[int]:
    """Ids of the XDP programs on every link of the deployment (gateways and their peers)."""
    ids = set()
    for ns in p.namespaces:
        for link in json.loads(sh("ip", "-n", ns, "-j", "link", "show")):
            prog = (link.get("xdp") or {}).get("prog") or {}
            if "id" in prog:
                ids.add(int(prog["id"]))
    return ids


def test_down_leaves_nothing_behind() -> None:
    if os.geteuid() != 0:
        pytest.skip("integration tests need root")
    ex = netns.Executor()
    deploy.down(ex, log=lambda m: None)  # start from nothing
    links0 = _root_links()
    procs0 = set(_our_processes())
    spec = topology.load(SMALL)
    dep = deploy.Deployment(topology.plan(spec), ex, topology_path=str(SMALL))
    try:
        dep.up(log=lambda m: print(f"[up] {m}"))
        state = st.load()
        assert state is not None and state.complete
        progs = _xdp_prog_ids(dep.plan)
        pids = {pid for f in deploy.pidfiles(dep.plan) if (pid := pids_mod.read_pid(f))}
        assert pids and (progs or not any(state.fastpath.values()))
        assert _our_processes(), "the deployment runs no process we can see"
    finally:
        deploy.down(ex, log=lambda m: print(f"[down] {m}"))

    left: dict[str, object] = {}
    left["namespaces"] = netns.list_namespaces(ex, topology.PREFIX)
    left["root links"] = sorted(_root_links() - links0)
    left["pins"] = sorted(str(x) for x in topology.PIN_ROOT.rglob("*")) \
        if topology.PIN_ROOT.exists() else []
    left["pin root"] = topology.PIN_ROOT.exists()
    left["fast-path state files"] = sorted(
        str(f) for f in Path("/run/crosszone/fastpath").glob(f"*{topology.PIN_ROOT.name}_*"))
    left["run dir"] = topology.RUN_DIR.exists()
    left["FRR pathspace dirs"] = sorted(
        str(d) for d in deploy.FRR_PATHSPACES.glob(f"{topology.PREFIX}*"))
    left["xdp programs"] = sorted(i for i in progs if _prog_exists(i))
    # A zombie (state Z) has exited and holds nothing but its pid until its parent (here the
    # container's init) reaps it.
    left["daemons"] = sorted(pid for pid in pids if Path(f"/proc/{pid}").exists()
                             and "Z" not in deploy._proc_state(pid))
    left["processes"] = {pid: cmd for pid, cmd in _our_processes().items() if pid not in procs0}
    assert not any(left.values()), f"left behind: { {k: v for k, v in left.items() if v} }"
