"""`crosszone fastpath ...` commands: attach, detach, stats.

`crosszone fastpath run` (a pcap through the program) is the lab's, in
crosszone_lab/pcap_commands.py: reading pcaps needs scapy.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from crosszone.intent.errors import InvalidIntentError

fastpath_app = typer.Typer(help="Run, attach and inspect the XDP fast path.", no_args_is_help=True)
console = Console(emoji=False)  # ':a:' in an IPv6 address is not an emoji


def _fail(msg: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {msg}")
    raise typer.Exit(2)


@fastpath_app.command("attach")
def attach_cmd(
    intent: Path = typer.Option(..., "--intent"),
    pin_dir: Path = typer.Option(..., "--pin-dir", help="bpffs directory for the pins."),
    netns: str = typer.Option("", "--netns", help="Network namespace of the interfaces."),
    gateway: str = typer.Option(
        "", "--gateway", help="Gateway of the intent to attach (needed when it has several)."
    ),
) -> None:
    """Load the fast path, program it from an intent and attach it to the gateway's ports."""
    from crosszone.fastpath.deploy import attach

    try:
        bound = attach(intent, pin_dir, netns or None, gateway=gateway or None)
    except InvalidIntentError as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(str(exc))
        return
    names = ", ".join(f"{p.name}({p.ifindex})" for p in bound.ports)
    console.print(f"attached to {names}; maps pinned under {pin_dir}/maps")


@fastpath_app.command("detach")
def detach_cmd(
    pin_dir: Path = typer.Option(..., "--pin-dir"),
    netns: str = typer.Option("", "--netns", help="Accepted for symmetry; the state file knows."),
) -> None:
    """Detach everything `attach` attached and remove its pins."""
    from crosszone.fastpath.deploy import detach

    n = detach(pin_dir)
    console.print(f"detached {n} program(s); removed {pin_dir}")


@fastpath_app.command("stats")
def stats_cmd(
    pin_dir: Path = typer.Option(..., "--pin-dir"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Counters of an attached gateway: packets and bytes by reason, per-VPC traffic."""
    from crosszone.fastpath.deploy import pinned_maps

    try:
        maps = pinned_maps(pin_dir)
    except (OSError, FileNotFoundError) as exc:
        _fail(str(exc))
        return
    reasons = {r.label: {"packets": p, "bytes": b} for r, (p, b) in maps.reason_stats().items()}
    totals = {"forward": 0, "pass": 0, "drop": 0}
    for r, (p, _b) in maps.reason_stats().items():
        totals[r.verdict_class] += p
    if as_json:
        sys.stdout.write(json.dumps({"totals": totals, "reasons": reasons}) + "\n")
        return
    table = Table(title=f"fast path counters ({pin_dir})")
    table.add_column("reason")
    table.add_column("packets", justify="right")
    table.add_column("bytes", justify="right")
    for name, c in reasons.items():
        if c["packets"]:
            table.add_row(name, str(c["packets"]), str(c["bytes"]))
    console.print(table)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add the fastpath group."""
    app.add_typer(fastpath_app, name="fastpath")
