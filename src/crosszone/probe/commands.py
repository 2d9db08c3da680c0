"""`crosszone probe --config FILE`: run a canary or production probe (docs/migrate.md)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape


def probe_cmd(
    config: Path = typer.Option(..., "--config", help="The probe's YAML file (docs/migrate.md)."),
    store: str = typer.Option("sqlite:///var/lib/crosszone/state.db", "--store",
                              envvar="CROSSZONE_STORE",
                              help="sqlite:///path.db, etcd://[user@]h:p[,h:p...] or "
                                   "etcds://... (password: CROSSZONE_ETCD_PASSWORD[_FILE])."),
    once: bool = typer.Option(False, "--once",
                              help="One round: print its report as JSON, exit 1 if a read "
                                   "failed."),
) -> None:
    """Read known documents from the storage nodes every interval, byte-exact, over IPv4 and
    IPv6, and report the verdicts to the store for the migration's guards."""
    import signal

    from crosszone.probe.config import ProbeConfigError, load
    from crosszone.probe.daemon import ProbeDaemon
    from crosszone.store.store import open_store

    console = Console(stderr=True)
    try:
        cfg = load(config)
    except ProbeConfigError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    try:
        st = open_store(store)
    except ValueError as exc:
        console.print(f"[red]error:[/red] --store: {escape(str(exc))}", highlight=False,
                      soft_wrap=True)
        raise typer.Exit(2) from None
    daemon = ProbeDaemon(cfg, st, log=lambda m: console.print(escape(m), highlight=False))
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop.set())
    signal.signal(signal.SIGINT, lambda *_: daemon.stop.set())
    try:
        daemon.run(max_rounds=1 if once else None)
    finally:
        st.close()
    if once and daemon.last_report is not None:
        print(json.dumps(json.loads(daemon.last_report.to_json()), indent=2))
        if daemon.errors:
            raise typer.Exit(1)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add `crosszone probe`."""
    del bench_app  # no benchmark
    app.command("probe")(probe_cmd)
