"""A client of an FRR daemon's vty socket: configuration and show commands in a millisecond.

`vtysh` starts a process that connects to every daemon of the namespace: 70 ms (`-d bgpd`) to
700 ms on a busy box, which a migration step that wants to converge within 100 ms cannot pay
once per gateway. The daemons' unix vty sockets speak a simple protocol (what vtysh itself
sends): a command line ending in NUL; the answer is the output followed by three NULs and a
status byte (0: success). One connection per daemon stays open for the whole migration.
"""

from __future__ import annotations

import socket
from pathlib import Path

from crosszone_lab.emulate.frr import frr_dir

CMD_SUCCESS, CMD_WARNING = 0, 1


class VtyError(RuntimeError):
    """A command the daemon refused (the message has its output)."""


class Vty:
    """One open vty session with a daemon of a namespace (starts in enable mode)."""

    def __init__(self, ns: str, daemon: str = "bgpd", timeout: float = 10.0) -> None:
        self.where = f"{daemon} in {ns}"
        path = Path(frr_dir(ns)) / f"{daemon}.vty"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(str(path))
        except OSError as exc:
            self.sock.close()
            raise VtyError(f"cannot reach {self.where} ({path}): {exc.strerror}") from None
        self.command("enable")

    def command(self, line: str, check: bool = True) -> str:
        """Run one command; its output. VtyError when it failed and `check`."""
        self.sock.sendall(line.encode() + b"\0")
        buf = bytearray()
        while not (len(buf) >= 4 and buf[-4:-1] == b"\0\0\0"):
            chunk = self.sock.recv(65536)
            if not chunk:
                raise VtyError(f"{self.where} closed the session during {line!r}")
            buf += chunk
        status, out = buf[-1], bytes(buf[:-4]).decode(errors="replace")
        if check and status not in (CMD_SUCCESS, CMD_WARNING):
            raise VtyError(f"{self.where}: {line!r} failed ({status}): {out.strip()[:200]}")
        return out

    def run(self, lines: list[str], check: bool = True) -> None:
        """Run commands in order (a configuration block ends with `end`)."""
        for line in lines:
            self.command(line, check)

    def close(self) -> None:
        """Close the session."""
        self.sock.close()
