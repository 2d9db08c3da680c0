"""The `crosszone` command: one entry point, one sub-command group per plane.

Each plane registers its own commands in a `commands.py` module so that this file stays a table of
contents and a plane can be read (and tested) on its own.
"""

from __future__ import annotations

import importlib
import sys

import typer

app = typer.Typer(
    help="crosszone: XDP VPC gateway between a GPU compute zone and a storage zone.",
    no_args_is_help=True,
    add_completion=False,
)
bench_app = typer.Typer(
    help="Benchmarks. Each prints JSON lines; none is a test.", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")

# Every module that adds commands, each exposing register(app, bench_app). A module that fails to
# import is a broken install: the error propagates (no command silently disappears).
COMMAND_MODULES = (
    "crosszone.intent.commands",
    "crosszone.fastpath.commands",
    "crosszone.agent.commands",
    "crosszone.control.commands",
    "crosszone.emulate.commands",
    "crosszone.emulate.migrate_commands",
    "crosszone.plan.commands",
    "crosszone.bench.commands",
    "crosszone.demo",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app, bench_app)


def main() -> None:
    """Run the command line. An environment problem (a kernel feature refused, a privilege or
    a built file missing) ends it with one line naming what was needed and what the machine
    answered, exit code 2; a crosszone failure keeps its traceback, which a bug report needs."""
    from crosszone.linux.environment import EXIT_ENVIRONMENT, describe, is_environment_problem

    try:
        app()
    except Exception as exc:
        if not is_environment_problem(exc):
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_ENVIRONMENT) from None


if __name__ == "__main__":
    main()
