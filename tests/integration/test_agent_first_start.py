"""A real agent's first start on a store whose intent is invalid (issue 26, point 3).

With no pinned maps (a new gateway, or after a reboot) and `intent/core` = `[]`, the agent used
to exit with InvalidIntentError. Now it waits unattached, says why in `status/<gateway>` and on
stderr (once), and attaches and programs the maps once a valid intent arrives. The gateway's
one interface is a veth in a private network namespace; everything is removed afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from crosszone.control.service import Controller
from crosszone.store.sqlite_store import SqliteStore
from crosszone.store.store import INTENT, STATUS
from crosszone_lab.bench.control import synthetic

pytestmark = pytest.mark.integration


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def _wait(what: str, test: Callable[[], Any], timeout: float, proc: subprocess.Popen,
          log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = test()
        if value:
            return value
        assert proc.poll() is None, f"the agent exited ({proc.returncode}):\n{log.read_text()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{log.read_text()}"
        time.sleep(0.1)


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"czt26-{os.getpid()}"
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "add", "cz0", "type", "veth", "peer", "name", "cz1")
        for dev in ("lo", "cz0", "cz1"):
            _ip("-n", name, "link", "set", dev, "up")
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)  # its devices and XDP too


def test_agent_waits_for_a_valid_intent_then_attaches(netns: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="czt26-"))
    bpf = Path(tempfile.mkdtemp(prefix="czt26-", dir="/sys/fs/bpf"))
    pins = bpf / "gw-a"  # no pins yet: a first start
    store = SqliteStore(str(tmp / "s.db"))
    log = tmp / "agent.log"
    proc = None
    try:
        store.put(INTENT + "core", b"[]")
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "crosszone.cli", "agent", "--gateway", "gw-a",
                 "--store", f"sqlite://{tmp}/s.db", "--netns", netns, "--pin-dir", str(pins),
                 "--metrics", "", "--state-file", str(tmp / "state.json"), "--no-routing"],
                stdout=out, stderr=subprocess.STDOUT)

        def status() -> dict[str, Any]:
            return json.loads(store.get(STATUS + "gw-a") or b"{}")
        got = _wait("a rejecting status", lambda: status().get("health") == "rejecting" and
                    status(), 60, proc, log)
        assert "not attached" in got["message"] and "not a JSON object but list" in got[
            "message"], got
        time.sleep(1)  # it keeps waiting: alive, unattached, no pins
        assert proc.poll() is None and "xdp" not in _ip("-n", netns, "link", "show", "cz0")
        assert not pins.exists()
        assert log.read_text().count("health rejecting not attached") == 1, log.read_text()
        rows = store.log_rows()
        time.sleep(6)  # past the 5 s backoff: tries again, writes no status (nothing changed)
        assert store.log_rows() == rows

        ctl = Controller(store)
        assert ctl.stored_problem is not None
        intent = synthetic(1000, 10).replace("{name: lo,", "{name: cz0,").replace(
            "interface: lo", "interface: cz0")
        rev = ctl.apply(intent).revision
        assert rev is not None
        _wait("the agent to attach and apply", lambda: status().get("health") == "ok" and (
            status().get("revision") or 0) >= rev, 60, proc, log)
        assert "xdp" in _ip("-n", netns, "link", "show", "cz0")
        assert (pins / "maps").is_dir() and status()["occupancy"]["routes4"] == 1000
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        store.close()
        shutil.rmtree(bpf, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
