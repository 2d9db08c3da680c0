"""The error for an environment problem: something a command needed from the machine (a kernel
feature, a privilege, a built file, a tool) that the machine refused or lacks.

Commands raise it with what they needed and what the kernel or the system answered; the
`crosszone` entry point prints it as one line and exits 2, the code of every environment
problem (a crosszone failure, wrong forwarding or an error through crosszone, exits 1).
"""

from __future__ import annotations

import errno
import sys

#: Exit code of a command stopped by an environment problem.
EXIT_ENVIRONMENT = 2


class EnvironmentProblem(RuntimeError):
    """`needed` could not be had: `answer` is what the machine said."""

    def __init__(self, needed: str, answer: str) -> None:
        super().__init__(f"{needed}: {answer}")
        self.needed = needed
        self.answer = answer


def is_environment_problem(exc: BaseException) -> bool:
    """Whether `exc` is the machine's answer rather than a crosszone failure: an
    EnvironmentProblem, a libbpf call the kernel refused, a missing file or privilege."""
    if isinstance(exc, EnvironmentProblem | PermissionError | FileNotFoundError):
        return True
    # libbpf_abi is imported only by commands that load BPF (it loads libbpf.so on import).
    abi = sys.modules.get("crosszone.fastpath.libbpf_abi")
    return abi is not None and isinstance(exc, abi.BpfError)


def describe(exc: BaseException) -> str:
    """One line for an environment problem: what was needed and what the machine answered."""
    message = " ".join(str(exc).split())
    if isinstance(exc, EnvironmentProblem | PermissionError | FileNotFoundError):
        return message
    # a libbpf call: BpfError's strerror is "call(target): reason"
    assert isinstance(exc, OSError)
    name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
    return f"the kernel refused {' '.join(str(exc.strerror).split())} ({name})"
