"""Enter a named network namespace (network only) for the calling thread.

`ip netns exec` also unshares the mount namespace and remounts /sys, which hides the root bpffs
where the gateway's maps are pinned (seen on Linux 6.18). setns(CLONE_NEWNET) alone keeps the root
mounts, so pins made here outlive the process and any tool can find them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

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
