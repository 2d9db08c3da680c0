"""Progress of long command-line work (emulate up, benchmarks, applying a big intent), always on
standard error: standard output carries only results, so `--json` output stays parseable.

On a terminal a spinner shows the step under way and each finished step stays as a line; in a
log or a pipe each step is one plain line. Every line names the work and the elapsed time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.status import Status


class Progress:
    """`with Progress("emulate up") as p: p.step("building 12 namespaces")`."""

    def __init__(self, title: str, console: Console | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.title = title
        self.console = console or Console(stderr=True, highlight=False)
        self.clock = clock
        self.start = clock()
        self.steps = 0
        self._status: Status | None = None

    def __enter__(self) -> Progress:
        self.start = self.clock()
        if self.console.is_terminal:
            self._status = self.console.status(escape(f"{self.title}: starting"))
            self._status.start()
        return self

    def step(self, message: str) -> None:
        """A new step begins: say so (spinner text on a terminal, a line everywhere)."""
        self.steps += 1
        self.console.print(f"[cyan]{escape(self.title)}[/cyan] ({self._elapsed()}) "
                           f"{escape(message)}", markup=True, highlight=False)
        if self._status is not None:
            self._status.update(escape(f"{self.title}: {message}"))  # a file name may hold [/x]

    def _elapsed(self) -> str:
        return f"{self.clock() - self.start:5.1f} s"

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._status is not None:
            self._status.stop()
        outcome = "done" if kind is None else "failed"
        self.console.print(f"[cyan]{escape(self.title)}[/cyan] ({self._elapsed()}) {outcome}",
                           markup=True, highlight=False)
