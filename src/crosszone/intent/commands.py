"""`crosszone check FILE` and `crosszone intent migrate FILE`."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
import yaml
from rich.console import Console
from rich.markup import escape

from crosszone.intent.errors import InvalidIntentError

intent_app = typer.Typer(help="Intent files: migrate version 1 to version 2.",
                         no_args_is_help=True)


def check_cmd(file: Path = typer.Argument(..., help="Intent YAML (version 1 or 2).")) -> None:
    """Validate an intent file without touching anything; exit 2 with the first problem."""
    from crosszone.intent.cluster import load_versioned, table_counts

    try:
        # read and parsed once, the version taken from the same parse: a second parse only for the
        # version costs a 2M-route file about 18 s
        c, version = load_versioned(file)
    except InvalidIntentError as exc:
        # escaped: the message quotes the file (a key, a name, the path), which may hold `[/x]`
        Console(stderr=True).print(f"[red]invalid:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    counts = table_counts(c)
    routes, addrs = counts["routes"], counts["hosts"]
    hosts = len(c.hosts) + len(c.hosts_compact)
    note = ""
    if version == 1:
        note = " (version 1: read as a one-gateway cluster; `crosszone intent migrate` " \
               "prints it as version 2)"
    def n(count: int, what: str) -> str:
        return f"{count} {what}" + ("" if count == 1 else "s")

    Console().print(f"{escape(str(file))}: valid{note}: {n(len(c.gateways), 'gateway')}, "
                    f"{n(len(c.vpcs), 'VPC')}, {n(routes, 'route')}, {n(hosts, 'host')} "
                    f"({addrs} address{'' if addrs == 1 else 'es'}), "
                    f"{n(len(c.storage_pools), 'storage pool')}", highlight=False)


@intent_app.command("migrate")
def migrate_cmd(file: Path = typer.Argument(..., help="A version-1 intent file.")) -> None:
    """Print a version-1 (or 2) intent file in the version-2 format."""
    from crosszone.intent.cluster import load_cluster, to_document

    try:
        c = load_cluster(file)
    except InvalidIntentError as exc:
        Console(stderr=True).print(f"[red]invalid:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    yaml.safe_dump(to_document(c), sys.stdout, sort_keys=False, default_flow_style=None)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add check and intent."""
    app.command("check")(check_cmd)
    app.add_typer(intent_app, name="intent")
