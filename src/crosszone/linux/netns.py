"""Network namespaces: enter one from Python, and run commands in them.

Two ways in, for two jobs:

- `in_netns` moves the calling thread into a named namespace with setns(CLONE_NEWNET) (network
  only). `ip netns exec` also unshares the mount namespace and remounts /sys, which hides the
  root bpffs where the gateway's maps are pinned; setns alone keeps the root mounts, so pins made
  here outlive the process and any tool can find them. Sockets opened inside stay in it.
- `Cmd` / `in_ns` plan command lines (`ip netns exec NS ...`); an `Executor` runs them, and a
  `RecordingExecutor` only records them, so that plans are tested without root.

Used by the fast path's loader, the emulator and the planner's validation tier; links.py has the
veth plumbing on top of it. Nothing here imports the rest of crosszone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_RUN_DIR = "/run/netns"
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the block inside network namespace `name` (None = stay), then come back."""
    if not name:
        yield
        return
    path = os.path.join(NETNS_RUN_DIR, name)
    try:
        target = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise OSError(f"no network namespace named {name!r} ({path})") from None
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def named_netns() -> list[str]:
    """Names of the namespaces under /run/netns."""
    try:
        return sorted(os.listdir(NETNS_RUN_DIR))
    except FileNotFoundError:
        return []


@dataclass(frozen=True)
class Cmd:
    """A command line; `check=False` for steps that may legitimately fail (already gone)."""

    argv: tuple[str, ...]
    check: bool = True
    stdin: str | None = None

    def __str__(self) -> str:
        return " ".join(self.argv)


@dataclass(frozen=True)
class WriteFile:
    """A file to write (parents created) as one step of a plan."""

    path: Path
    text: str


Op = Cmd | WriteFile


def cmd(*argv: str, check: bool = True, stdin: str | None = None) -> Cmd:
    """Build a Cmd from words."""
    return Cmd(tuple(argv), check, stdin)


def in_ns(ns: str, *argv: str, check: bool = True, stdin: str | None = None) -> Cmd:
    """A command run inside namespace `ns`."""
    return Cmd(("ip", "netns", "exec", ns, *argv), check, stdin)


class CommandFailed(RuntimeError):
    """A checked command exited non-zero."""


class Executor:
    """Runs operations for real."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose

    def apply(self, ops: Iterable[Op]) -> None:
        for op in ops:
            if isinstance(op, WriteFile):
                op.path.parent.mkdir(parents=True, exist_ok=True)
                op.path.write_text(op.text)
                continue
            if self.verbose:
                print("+", op)
            res = subprocess.run(
                op.argv, input=op.stdin, capture_output=True, text=True, check=False
            )
            if op.check and res.returncode != 0:
                raise CommandFailed(f"`{op}` exited {res.returncode}: {res.stderr.strip()}")

    def output(self, argv: Sequence[str], check: bool = True) -> str:
        """Run a query and return its stdout."""
        res = subprocess.run(list(argv), capture_output=True, text=True, check=False)
        if check and res.returncode != 0:
            raise CommandFailed(f"`{' '.join(argv)}` exited {res.returncode}: {res.stderr.strip()}")
        return res.stdout


@dataclass
class RecordingExecutor(Executor):
    """Records operations instead of running them (unit tests)."""

    ops: list[Op] = field(default_factory=list)
    outputs: dict[tuple[str, ...], str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(verbose=False)

    def apply(self, ops: Iterable[Op]) -> None:
        self.ops.extend(ops)

    def output(self, argv: Sequence[str], check: bool = True) -> str:
        return self.outputs.get(tuple(argv), "")


def plan_namespaces(names: Iterable[str]) -> list[Op]:
    """Create every namespace (idempotent: existing ones are kept) with loopback up."""
    ops: list[Op] = []
    for ns in names:
        ops.append(cmd("ip", "netns", "add", ns, check=False))
        ops.append(in_ns(ns, "ip", "link", "set", "lo", "up"))
    return ops


def delete_namespaces(names: Iterable[str]) -> list[Op]:
    """Remove namespaces (tolerant of ones already gone)."""
    return [cmd("ip", "netns", "del", ns, check=False) for ns in names]


def ns_sysctls(ns: str, forwarding: bool) -> list[Cmd]:
    """Per-namespace sysctls: forwarding, no reverse-path filter, L4 ECMP hashing."""
    sets = [
        # Asymmetric paths are normal here (ECMP per direction), so strict rp_filter would drop.
        "net.ipv4.conf.all.rp_filter=0",
        "net.ipv4.conf.default.rp_filter=0",
        # Hash ECMP on the 5-tuple: VXLAN flows differ only in the outer UDP source port.
        "net.ipv4.fib_multipath_hash_policy=1",
        f"net.ipv4.ip_forward={1 if forwarding else 0}",
        "net.ipv6.conf.all.forwarding=" + ("1" if forwarding else "0"),
        # IPv6 flushes global addresses when a link goes down unless told otherwise; the
        # failover tests take links down and up, and BGP's IPv6 next hops need them back.
        "net.ipv6.conf.all.keep_addr_on_down=1",
        "net.ipv6.conf.default.keep_addr_on_down=1",
    ]
    return [in_ns(ns, "sysctl", "-qw", s) for s in sets]


def list_namespaces(ex: Executor, prefix: str) -> list[str]:
    """Names of existing namespaces starting with prefix."""
    out = ex.output(["ip", "netns", "list"], check=False)
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted(n for n in names if n.startswith(prefix))
