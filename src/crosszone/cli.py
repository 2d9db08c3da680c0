"""The `crosszone` command: one entry point, one sub-command group per plane.

Each plane registers its own commands in a `commands.py` module so that this file stays a table of
contents and a plane can be read (and tested) on its own.
"""

from __future__ import annotations

import importlib
import importlib.util
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

# The product's command modules, each exposing register(app, bench_app): what a gateway host runs.
# A module that fails to import is a broken install: the error propagates (no command silently
# disappears).
COMMAND_MODULES = (
    "crosszone.intent.commands",
    "crosszone.fastpath.commands",
    "crosszone.agent.commands",
    "crosszone.control.commands",
    "crosszone.migrate.commands",
    "crosszone.plan.commands",
    "crosszone.probe.commands",
)
# The lab's (crosszone_lab: emulator, workload, benchmarks, demo, pcap runs, charts), registered
# only when the lab is installed (`pip install crosszone[lab]`, or `make setup` in a checkout).
# The product never imports the lab; these are names, imported here only.
LAB_COMMAND_MODULES = (
    "crosszone_lab.pcap_commands",
    "crosszone_lab.charts",
    "crosszone_lab.emulate.commands",
    "crosszone_lab.emulate.migrate_commands",
    "crosszone_lab.bench.commands",
    "crosszone_lab.demo",
)
#: The top-level modules of the `lab` extra (pyproject.toml) that the lab imports: the lab is
#: installed when crosszone_lab and these are importable (the wheel carries crosszone_lab always).
LAB_REQUIRES = ("scapy", "matplotlib")
#: The commands the lab adds, by group ("" is the top level). Without the lab each is still there
#: and answers "install crosszone[lab]" instead of click's "No such command".
LAB_COMMANDS: dict[str, tuple[str, ...]] = {
    "": ("emulate", "workload", "demo"),
    "bench": ("fastpath", "forward", "control", "simulate", "policy", "fairness", "failover",
              "switches", "migrate"),
    "fastpath": ("run",),
}


def lab_installed() -> bool:
    """Whether crosszone_lab and the dependencies of its extra can be imported."""
    return all(importlib.util.find_spec(m) is not None for m in ("crosszone_lab", *LAB_REQUIRES))


def _lab_missing(group: typer.Typer, words: str, name: str) -> None:
    """Register `name` on `group` as a command that says the lab is needed, whatever its args."""

    @group.command(name, help="(lab) not installed: install crosszone[lab].",
                   context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
                   add_help_option=False)
    def missing(ctx: typer.Context) -> None:
        print(f"error: `crosszone {words}` is part of the lab, which is not installed: "
              "install crosszone[lab]", file=sys.stderr)
        raise typer.Exit(2)


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app, bench_app)

if lab_installed():
    for _name in LAB_COMMAND_MODULES:
        importlib.import_module(_name).register(app, bench_app)
else:
    from crosszone.fastpath.commands import fastpath_app

    _groups = {"": app, "bench": bench_app, "fastpath": fastpath_app}
    for _group, _names in LAB_COMMANDS.items():
        for _cmd in _names:
            _lab_missing(_groups[_group], f"{_group} {_cmd}".strip(), _cmd)


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
