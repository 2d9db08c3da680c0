"""A reading taken every few seconds in a thread of its own and served from memory.

What an agent or an exporter reads from outside its process (FRR's sessions, the links, `tc`'s
queue counters) may take seconds on a loaded box, and a Prometheus scrape must answer at once:
it is how the migration guard and Prometheus know the process lives. So a thread takes the
reading every `every` seconds, a scrape serves the last one, and serves none once it is older
than `max_age` (a reader stuck that long is itself news: the families go missing instead of
going stale). Used by the agent's RoutingCollector and the emulator's queue exporter.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PeriodicReader(Generic[T]):
    """Subclasses say what one reading is (`take`); this keeps the last one and its time."""

    def __init__(self, every: float, max_age: float, name: str,
                 now: Callable[[], float] = time.monotonic) -> None:
        self.every, self.max_age, self.now = every, max_age, now
        self._name = name
        self._last: tuple[float, T] | None = None
        self._lock = threading.Lock()
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None

    def take(self) -> T:
        """One reading (runs in the reader's thread once started)."""
        raise NotImplementedError

    def refresh(self) -> T:
        """Take one reading now and keep it (the thread does this every `every` seconds)."""
        value = self.take()
        with self._lock:
            self._last = (self.now(), value)
        return value

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Read now, then every `every` seconds in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the reading thread (after the reading under way, if any)."""
        self._halt.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._halt.is_set():
            self.refresh()
            self._halt.wait(self.every)

    def last(self) -> T | None:
        """The last reading, or None when there is none or it is older than `max_age`."""
        with self._lock:
            last = self._last
        if last is None or self.now() - last[0] > self.max_age:
            return None
        return last[1]

    def age(self) -> float | None:
        """Seconds since the last reading (None before the first)."""
        with self._lock:
            last = self._last
        return None if last is None else max(0.0, self.now() - last[0])
