"""Wait for a file in a directory to change, without polling it (Linux inotify).

`DirChanges(directory, prefix)` watches one directory; `wait(timeout)` returns True as soon as a
file whose name starts with `prefix` was written, created, moved in or deleted (or the kernel's
event queue overflowed, so something may have), False after `timeout` seconds of nothing. The
directory, not the file, is watched: a file deleted and created again (SQLite's `-wal` when the
last connection closes) stays watched. Events of other names in the directory are read and
ignored, so a busy log file beside the database does not wake the waiter.

The standard library has no inotify; libc's three calls are used through ctypes. An error
(no inotify, `fs.inotify.max_user_instances` reached, a directory that is gone) raises
OSError from the constructor; callers fall back to polling.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import time

IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_Q_OVERFLOW = 0x00004000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_MASK = IN_MODIFY | IN_MOVED_TO | IN_CREATE | IN_DELETE
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len; then `len` bytes of NUL-padded name

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def matches(data: bytes, prefix: bytes) -> bool:
    """Whether a buffer of inotify events holds one for a name starting with `prefix`, or an
    overflow (events were lost). A truncated trailing event is ignored."""
    off = 0
    while off + _HEADER.size <= len(data):
        _wd, mask, _cookie, length = _HEADER.unpack_from(data, off)
        if off + _HEADER.size + length > len(data):
            break  # the kernel reads whole events only; never read past the buffer
        name = data[off + _HEADER.size:off + _HEADER.size + length].rstrip(b"\0")
        off += _HEADER.size + length
        if mask & IN_Q_OVERFLOW or (mask & _MASK and name.startswith(prefix)):
            return True
    return False


class DirChanges:
    """One inotify instance on `directory`, for names starting with `prefix`."""

    def __init__(self, directory: str, prefix: str) -> None:
        self.prefix = os.fsencode(prefix)
        self.fd = _check(_libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC), "inotify_init1")
        try:
            _check(_libc.inotify_add_watch(self.fd, os.fsencode(directory), _MASK),
                   f"inotify_add_watch {directory}")
        except OSError:
            os.close(self.fd)
            raise
        self._poll = select.poll()
        self._poll.register(self.fd, select.POLLIN)

    def wait(self, timeout: float) -> bool:
        """True as soon as a matching name changed (events already queued count), False after
        `timeout` seconds without one."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if not self._poll.poll(max(0, int(left * 1000 + 0.999))):
                return False
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                data = b""
            if matches(data, self.prefix):
                return True
            if deadline - time.monotonic() <= 0:
                return False

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> DirChanges:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
