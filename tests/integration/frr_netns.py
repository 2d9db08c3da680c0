"""Per-namespace FRR for tests: a namespace, its daemons started with `-N`, and their removal.

The daemons run the way the emulator runs them (`-N NS`, a private `--vty_socket` directory,
`-z` zserv socket, pidfiles), from a start file with no hostname: vtysh shows the machine's
hostname beside the daemons' and cannot remove either, so the agent renders the machine's
(frr_config.render's `hostname`) and the daemons must not start with another.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

FRR_BIN = Path("/usr/lib/frr")
DAEMONS = ("zebra", "staticd", "bfdd", "bgpd")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command, output captured."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=check, timeout=60)


def ns_sh(ns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run a command inside a namespace."""
    return sh("ip", "netns", "exec", ns, *argv, check=check)


@dataclass
class FrrNs:
    """One namespace's FRR: its directory (config, pidfiles and, with private_sockets, vty
    and zserv sockets as the emulator has them; without, FRR's own /var/run/frr/NS, which
    `vtysh -N NS` and `frr-reload.py -N NS` find)."""

    ns: str
    dir: Path
    private_sockets: bool = True

    @property
    def sockets(self) -> Path:
        """Where the daemons' vty sockets are."""
        return self.dir if self.private_sockets else Path("/var/run/frr") / self.ns

    def start(self, config: str = "frr defaults datacenter\n!\n") -> None:
        """Write the start file and start zebra, staticd, bfdd and bgpd (daemonised)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "frr.conf").write_text(config)
        self.sockets.mkdir(parents=True, exist_ok=True)
        sh("chown", "-R", "frr:frr", str(self.dir), str(self.sockets))
        for daemon in DAEMONS:
            extra = ["--bfdctl", str(self.dir / "bfdd.sock")] if daemon == "bfdd" else []
            where = (["-z", str(self.dir / "zserv.api"), "--vty_socket", str(self.dir)]
                     if self.private_sockets else [])
            ns_sh(self.ns, str(FRR_BIN / daemon), "-d", "-N", self.ns, *extra,
                  "-f", str(self.dir / "frr.conf"), "-i", str(self.dir / f"{daemon}.pid"),
                  *where, "-P", "0")
        deadline = time.monotonic() + 10
        while not all((self.sockets / f"{d}.vty").exists() for d in DAEMONS):
            if time.monotonic() > deadline:
                raise RuntimeError(f"FRR of {self.ns} did not start")
            time.sleep(0.05)

    def pids(self) -> dict[str, int]:
        """daemon -> pid, of the daemons whose pidfile names a live process."""
        out = {}
        for d in DAEMONS:
            try:
                pid = int((self.dir / f"{d}.pid").read_text().strip())
                os.kill(pid, 0)
            except (OSError, ValueError):
                continue
            out[d] = pid
        return out

    def stop(self) -> None:
        """Kill the daemons this object started (by their pidfiles)."""
        for pid in self.pids().values():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in self.pids().values():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        # FRR makes /var/run/frr/NS for a -N instance even when its sockets are elsewhere
        shutil.rmtree(Path("/var/run/frr") / self.ns, ignore_errors=True)

    def vtysh(self, *commands: str) -> str:
        """Output of vtysh commands against this instance."""
        argv = ["vtysh", "--vty_socket", str(self.sockets)]
        for c in commands:
            argv += ["-c", c]
        return sh(*argv).stdout
