"""Processes named by pidfiles: read one, tell whether it still runs.

One rule for every daemon the emulator starts (FRR, agents, the controller, Prometheus): a
process that exited but is still our unreaped child (a zombie) answers `kill(pid, 0)` like a
live one, so it is reaped first; a process of another user that we may not signal is alive.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def read_pid(path: Path) -> int | None:
    """The pid on the first line of `path` (None when missing or not a number)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int) -> bool:
    """Whether process `pid` runs (an exited child of ours is reaped and counts as gone)."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pidfile_alive(path: Path) -> bool:
    """Whether the process named by pidfile `path` runs (False without a readable pid)."""
    pid = read_pid(path)
    return pid is not None and pid > 0 and pid_alive(pid)
