"""RCU grace periods for the user-space writer of the fast path's maps, and the memory-order
precondition of writing those maps from Python.

The maps' writers (`slot_table.SlotMap`, `record_table.RecordMap`) never rewrite memory a packet
may still be reading: a slot deleted, or a record copy that was live, is reused only after a
grace period has passed since packets last could have found it. Every XDP program run (a NIC's
NAPI poll, generic XDP, BPF_PROG_TEST_RUN) is inside an RCU read-side section, and
membarrier(MEMBARRIER_CMD_GLOBAL) is synchronize_rcu() in the kernel (kernel/sched/membarrier.c):
when it returns, every program run that started before the call has finished.

A grace period takes about 10 ms here, so `Grace` runs them in a background thread as soon as a
writer marks a change, and a writer waits only if it reuses memory sooner than that. A new
process does not know what the previous writer did just before it stopped, so it owes one grace
period from the start.

Ordering: the writers store a value before the word that makes it visible (a slot's key, a
record's selector), from Python through an mmap or through two syscalls in that order. x86-64
keeps stores in program order for other CPUs (TSO), so no fence is needed there; nothing in
Python can emit one, so `require_tso` refuses other architectures with a clear error instead of
relying on luck.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import threading
from collections.abc import Callable

from crosszone.fastpath.libbpf_abi import BpfError

_SYS_MEMBARRIER = 324  # x86-64
_MEMBARRIER_CMD_QUERY = 0
_MEMBARRIER_CMD_GLOBAL = 1 << 0
_TSO = frozenset({"x86_64", "amd64"})


def require_tso(what: str) -> None:
    """Refuse to write the fast path's maps on a CPU that may reorder stores (not x86-64)."""
    machine = platform.machine().lower()
    if machine not in _TSO:
        raise BpfError(errno.ENOTSUP, "map writer", what,
                       f"{machine}: the map writers rely on x86-64 store order (value before key, "
                       "copy before selector) and cannot emit a fence from Python")


def synchronize_rcu() -> None:
    """Wait for a kernel RCU grace period: membarrier(MEMBARRIER_CMD_GLOBAL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(_SYS_MEMBARRIER, _MEMBARRIER_CMD_GLOBAL, 0, 0) != 0:
        err = ctypes.get_errno()
        raise BpfError(err, "membarrier", "MEMBARRIER_CMD_GLOBAL",
                       f"{os.strerror(err)}: no RCU grace period (nohz_full kernels refuse it)")


def map_identity(m: object) -> object:
    """What names one kernel map across file descriptors (its id; a fake: the object)."""
    ident = getattr(m, "id", None)
    return ident if isinstance(ident, int) and ident > 0 else id(m)


class Grace:
    """Generations of changes and the grace periods that cover them.

    `mark` numbers a change that needs a grace period before its memory is reused and starts one
    in the background; `wait_for(gen)` returns once a grace period that began after change `gen`
    has ended. Generation 0 is everything a previous writer did (owed from the start)."""

    def __init__(self, sync: Callable[[], None] = synchronize_rcu,
                 background: bool = True) -> None:
        self._sync = sync
        self._background_ok = background    # False: only wait_for runs them (tests)
        self._lock = threading.Lock()       # one grace period at a time
        self._thread: threading.Thread | None = None
        self.marked = 0                     # the latest change that needs a grace period
        self.covered = -1                   # every change up to this one is covered
        self.periods = 0                    # grace periods run
        self.waits = 0                      # times a writer had to wait for one
        # What each map's writer changed last, by map (kernel map id), so that every writer
        # object over the same map in this process agrees: record index -> generation of its
        # last flip (record_table), or the generation of the latest delete (slot_table).
        self.flips: dict[object, dict[int, int]] = {}
        self.deletes: dict[object, int] = {}
        self.kick()

    def mark(self) -> int:
        """A new change's generation; its grace period starts in the background."""
        self.marked += 1
        self.kick()
        return self.marked

    def kick(self) -> None:
        """Run grace periods in a background thread until every marked change is covered."""
        if self._background_ok and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._background, name="cz-grace",
                                            daemon=True)
            self._thread.start()

    def wait_for(self, gen: int) -> None:
        """Block until change gen is covered by a grace period."""
        if self.covered >= gen:
            return
        self.waits += 1
        while self.covered < gen:
            self._run()

    def _background(self) -> None:
        try:
            while self.covered < self.marked:
                self._run()
        except BpfError:
            pass  # wait_for runs it again in the writer's thread and raises there

    def _run(self) -> None:
        """One grace period, covering every change marked before it starts."""
        with self._lock:
            target = self.marked
            if self.covered >= target:
                return
            self._sync()
            self.periods += 1
            self.covered = max(self.covered, target)


_PROCESS: Grace | None = None


def process_grace() -> Grace:
    """The process's grace periods, shared by every writer (one sequence serves all maps)."""
    global _PROCESS
    if _PROCESS is None:
        _PROCESS = Grace()
    return _PROCESS
