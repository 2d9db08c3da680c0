"""The `crosszone` command: one entry point, one sub-command group per plane.

Each plane registers its own commands in a `commands.py` module so that this file stays a table of
contents and a plane can be read (and tested) on its own.
"""

from __future__ import annotations

import importlib

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

# Modules that add commands: each exposes register(app, bench_app).
_COMMAND_MODULES = (
    "crosszone.fastpath.commands",
    "crosszone.intent.commands",
    "crosszone.plan.commands",
    "crosszone.emulate.commands",
    "crosszone.demo",
)

for _name in _COMMAND_MODULES:
    try:
        _mod = importlib.import_module(_name)
    except ModuleNotFoundError as exc:  # a plane not written yet
        if exc.name != _name:
            raise
        continue
    _mod.register(app, bench_app)


def main() -> None:
    """Run the command line."""
    app()


if __name__ == "__main__":
    main()
