"""A direct client of one FRR daemon's vty socket (`bgpd.vty`), for commands that cannot wait.

vtysh starts, reads vtysh.conf and connects to every daemon before it sends a command: 200 to
380 ms per run on the 2-core test box (tests/integration/bench_fail_closed_withdraw.py), more
than the fail-closed budget (issue 25: at most 100 ms of a gateway's share lost). The daemon's
socket speaks vtysh's own protocol (FRR lib/vty.c, vtysh_read): each command is a
NUL-terminated string; the daemon answers with its output followed by three NUL bytes and a
status byte (0: CMD_SUCCESS). A new connection starts in the view node, so `enable` comes first.
One command takes well under a millisecond.

Used by the fast path's fail-closed (routing_owner.fail_closed) and by the agent's reading of
its BGP and BFD sessions (routing.vty_asker: vtysh took up to 2 s per call on a loaded box);
configuration goes through frr_apply (frr-reload.py and vtysh), which also persists the file.
"""

from __future__ import annotations

import socket
from pathlib import Path

CMD_SUCCESS = 0
#: FRR's CMD_SUCCESS_DAEMON / warning codes that still mean the line was taken
_TAKEN = {0, 10}


class VtyError(RuntimeError):
    """The daemon refused a command or the socket failed (the message says which)."""


def run_commands(sock_path: Path, commands: list[str], timeout: float = 2.0) -> list[str]:
    """Send commands to one daemon's vty socket (after `enable`); their outputs, in order.
    Raises VtyError when one is refused (the rest are not sent)."""
    out: list[str] = []
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(sock_path))
            for cmd in ["enable", *commands]:
                s.sendall(cmd.encode() + b"\0")
                buf = b""
                while len(buf) < 4 or buf[-4:-1] != b"\0\0\0":
                    chunk = s.recv(65536)
                    if not chunk:
                        raise VtyError(f"{sock_path}: closed after {cmd!r}")
                    buf += chunk
                status, text = buf[-1], buf[:-4].decode(errors="replace")
                if status not in _TAKEN:
                    raise VtyError(f"{sock_path}: {cmd!r} refused (status {status}): "
                                   f"{text.strip()[:300]}")
                out.append(text)
    except OSError as exc:
        raise VtyError(f"{sock_path}: {exc}") from None
    return out[1:]
