"""Ctrl-C in the middle of `crosszone bench migrate` (SIGINT to its whole process group, as a
terminal sends it): the steps done so far and a summary marked interrupted are printed, the
probe's records survive (its peers are out of the terminal's group), exit code 130, and the
deployment, its daemons and the probe peers are gone afterwards (root; ~1 min)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from crosszone.linux import netns
from crosszone_lab.emulate import deploy, topology
from crosszone_lab.emulate.control_plane import crosszone_bin


def _probe_peers() -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if b"crosszone_lab.workload.udp_probe" in (d / "cmdline").read_bytes():
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def test_ctrl_c_reports_the_steps_done_and_leaves_nothing() -> None:
    if os.geteuid() != 0:
        pytest.skip("integration tests need root")
    ex = netns.Executor()
    proc = subprocess.Popen([crosszone_bin(), "bench", "migrate", "--steps", "10,50,100",
                             "--dwell", "3s"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    err: list[str] = []
    moved = threading.Event()

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if line.startswith("step_ok: step 1"):
                moved.set()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    try:
        assert moved.wait(300), "".join(err)[-3000:]
        time.sleep(1.0)  # into step 1's dwell
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=240)
        reader.join(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        deploy.down(ex, log=lambda _m: None)
    text = "".join(err)
    assert proc.returncode == 130, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    docs = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    summary = docs[-1]
    assert summary["summary"] is True and summary["interrupted"] is True, summary
    assert summary["migrations"] == ["legacy->crosszone: interrupted"], summary
    steps = docs[:-1]
    assert steps and steps[0]["weight_new"] == 10 and steps[0]["converge_ms"] > 0, steps
    assert summary["probe"]["sent"] > 1000  # the peers outlived Ctrl-C and saved their records
    assert summary["workload"] is None and isinstance(summary["failed_requests"], int)
    # --down (the default): nothing of the deployment is left, nor any probe peer
    assert netns.list_namespaces(ex, topology.PREFIX) == []
    deadline = time.monotonic() + 10
    while _probe_peers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _probe_peers() == []
