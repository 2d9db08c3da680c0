"""The `crosszone` command: one entry point, one sub-command group per plane.

Each plane registers its own commands in a `commands.py` module so that this file stays a table of
contents and a plane can be read (and tested) on its own.

The product's commands are registered on import; the lab's (emulator, benchmarks, demo: they
import matplotlib and scapy, about 1 s of CPU) only when a command line may need them
(`command`) or when `app` is read. A gateway host's daemons (`crosszone agent`, `controller`,
`probe`) thus start in a third of a second and never import the lab, also on a box whose
CPUs are saturated, where the lab's imports took a started probe tens of seconds.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any

import typer

_app = typer.Typer(
    help="crosszone: XDP VPC gateway between a GPU compute zone and a storage zone.",
    no_args_is_help=True,
    add_completion=False,
)
_bench_app = typer.Typer(
    help="Benchmarks. Each prints JSON lines; none is a test.", no_args_is_help=True
)
_app.add_typer(_bench_app, name="bench")

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
#: The product's top-level commands and groups the lab adds to or extends (chart writers for
#: `plan` and `simulate`, the emulated deployment for `migrate`): a command line naming one of
#: these needs the lab.
LAB_EXTENDS = ("bench", "fastpath", "migrate", "plan", "simulate")
#: The commands the lab adds, by group ("" is the top level). Without the lab each is still there
#: and answers "install crosszone[lab]" instead of click's "No such command".
LAB_COMMANDS: dict[str, tuple[str, ...]] = {
    "": ("emulate", "workload", "demo"),
    "bench": ("fastpath", "forward", "control", "simulate", "policy", "fairness", "failover",
              "switches", "migrate", "store-watch"),
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
    importlib.import_module(_name).register(_app, _bench_app)


def _top_level_names(t: typer.Typer) -> set[str]:
    """The names of `t`'s commands and groups, as a command line spells them."""
    names = {c.name or (c.callback.__name__.lower().replace("_", "-") if c.callback else "")
             for c in t.registered_commands}
    for g in t.registered_groups:
        name = g.name or (g.typer_instance.info.name if g.typer_instance else None)
        names.add(name if isinstance(name, str) else "")
    return names - {""}


#: The product's own top-level commands that never need the lab (agent, controller, probe...).
PRODUCT_ONLY = frozenset(_top_level_names(_app) - set(LAB_EXTENDS))
_lab_registered = False


def _register_lab() -> None:
    """Register the lab's commands (once), or the commands that say it is not installed."""
    global _lab_registered
    if _lab_registered:
        return
    _lab_registered = True
    if lab_installed():
        for name in LAB_COMMAND_MODULES:
            importlib.import_module(name).register(_app, _bench_app)
        return
    from crosszone.fastpath.commands import fastpath_app

    groups = {"": _app, "bench": _bench_app, "fastpath": fastpath_app}
    for group, names in LAB_COMMANDS.items():
        for cmd in names:
            _lab_missing(groups[group], f"{group} {cmd}".strip(), cmd)


def command(args: list[str]) -> typer.Typer:
    """The command for the command line `args` (without the program name): the product's
    alone when `args` names one of its own commands, with the lab's otherwise (a lab command,
    a group the lab extends, `--help`, nothing)."""
    first = next((a for a in args if not a.startswith("-")), None)
    if first not in PRODUCT_ONLY:
        _register_lab()
    return _app


def __getattr__(name: str) -> Any:
    """`app` and `bench_app`, with the lab's commands registered (what the tests invoke)."""
    if name in ("app", "bench_app"):
        _register_lab()
        return _app if name == "app" else _bench_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Run the command line. An environment problem (a kernel feature refused, a privilege or
    a built file missing) ends it with one line naming what was needed and what the machine
    answered, exit code 2; a crosszone failure keeps its traceback, which a bug report needs."""
    from crosszone.linux.environment import EXIT_ENVIRONMENT, describe, is_environment_problem

    try:
        command(sys.argv[1:])()
    except Exception as exc:
        if not is_environment_problem(exc):
            raise
        print(f"error: {describe(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_ENVIRONMENT) from None


if __name__ == "__main__":
    main()
