"""Pidfiles and liveness: one rule for every daemon the emulator starts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from crosszone.linux import pids


def test_read_pid_takes_the_first_number_or_nothing(tmp_path: Path) -> None:
    f = tmp_path / "x.pid"
    f.write_text("1234\n")
    assert pids.read_pid(f) == 1234
    f.write_text("  99 extra words\n")
    assert pids.read_pid(f) == 99
    for junk in ("", "abc", "\n"):
        f.write_text(junk)
        assert pids.read_pid(f) is None
    assert pids.read_pid(tmp_path / "missing.pid") is None


def test_a_running_process_is_alive_and_an_exited_child_is_not(tmp_path: Path) -> None:
    assert pids.pid_alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    # the child exits and stays a zombie (nobody waits for it) until pid_alive reaps it
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    assert not pids.pid_alive(child.pid)
    assert not Path(f"/proc/{child.pid}").exists()  # reaped
    f = tmp_path / "c.pid"
    f.write_text(f"{child.pid}\n")
    assert not pids.pidfile_alive(f)
    f.write_text(f"{os.getpid()}\n")
    assert pids.pidfile_alive(f)


def test_bad_pidfiles_are_not_alive(tmp_path: Path) -> None:
    f = tmp_path / "bad.pid"
    for text in ("", "0", "-1", "nope"):
        f.write_text(text)
        assert not pids.pidfile_alive(f)
    assert not pids.pidfile_alive(tmp_path / "none.pid")
