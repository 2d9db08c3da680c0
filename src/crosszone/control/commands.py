"""`crosszone controller`, `crosszone apply FILE [--dry-run]`, `crosszone status`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

console = Console()
DEFAULT_URL = "http://127.0.0.1:8470"
DEFAULT_STORE = "sqlite:///var/lib/crosszone/state.db"


def _fail(msg: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {msg}", highlight=False)
    raise typer.Exit(2)


def controller_cmd(
    store: str = typer.Option(DEFAULT_STORE, "--store", envvar="CROSSZONE_STORE",
                              help="sqlite:///path.db (default) or etcd://host:port."),
    listen: str = typer.Option("127.0.0.1:8470", "--listen", help="host:port of the API."),
    token: str = typer.Option("", "--token", envvar="CROSSZONE_TOKEN",
                              help="Token every write must carry (required)."),
) -> None:
    """Serve the REST API (OpenAPI at /docs and /openapi.json) over the store."""
    import uvicorn

    from crosszone.control.api import create_app
    from crosszone.control.service import Controller
    from crosszone.store.store import open_store

    if not token:
        _fail("a token is required (--token or CROSSZONE_TOKEN)")
    if store.startswith("sqlite://"):
        Path(store.removeprefix("sqlite://")).parent.mkdir(parents=True, exist_ok=True)
    ctl = Controller(open_store(store))
    host, _, port = listen.rpartition(":")
    uvicorn.run(create_app(ctl, token), host=host or "127.0.0.1", port=int(port),
                log_level="warning")


def _client(url: str, token: str):
    from crosszone.control.client import Client

    return Client(url, token)


def apply_cmd(
    file: Path = typer.Argument(..., help="Intent YAML (version 1 or 2)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the diff, change nothing."),
    url: str = typer.Option(DEFAULT_URL, "--controller", envvar="CROSSZONE_CONTROLLER"),
    token: str = typer.Option("", "--token", envvar="CROSSZONE_TOKEN"),
) -> None:
    """Send an intent to the controller (validated there and here first)."""
    from crosszone.control.client import ControllerError
    from crosszone.intent.cluster import load_cluster
    from crosszone.intent.errors import InvalidIntentError

    try:
        load_cluster(file)
    except InvalidIntentError as exc:
        _fail(str(exc))
    try:
        out = _client(url, token).apply(file.read_text(), dry_run=dry_run)
    except ControllerError as exc:
        _fail(str(exc))
        return
    title = "dry run: nothing applied" if dry_run else (
        f"applied as revision {out['revision']}" if out["revision"] else "no change")
    table = Table(title=f"{file}: {title}")
    for col in ("gateway", "map", "put", "delete"):
        table.add_column(col)
    for gw, d in sorted(out["gateways"].items()):
        if d.get("removed"):
            table.add_row(gw, "(gateway removed from the intent)", "", "")
            continue
        maps = sorted(set(d["put"]) | set(d["delete"]))
        if not maps:
            table.add_row(gw, "(no change)", "0", "0")
        for m in maps:
            table.add_row(gw, m, str(d["put"].get(m, 0)), str(d["delete"].get(m, 0)))
    console.print(table)
    console.print(f"store objects changed: {len(out['changed'])}", highlight=False)


def status_cmd(
    url: str = typer.Option(DEFAULT_URL, "--controller", envvar="CROSSZONE_CONTROLLER"),
) -> None:
    """Per-gateway status: revision applied, health, counters."""
    from crosszone.control.client import ControllerError

    try:
        out = _client(url, "").status()
    except ControllerError as exc:
        _fail(str(exc))
        return
    want = out["desired_revision"]
    table = Table(title=f"desired revision {want}")
    for col in ("gateway", "health", "applied", "in sync", "routes", "hosts", "forwarded",
                "dropped", "rejected", "message"):
        table.add_column(col)
    for gw, s in sorted(out["gateways"].items()):
        c = s.get("counters", {})
        table.add_row(gw, s.get("health", "?"), str(s.get("revision")),
                      "yes" if s.get("revision") == want else "no",
                      str(s.get("occupancy", {}).get("routes4", "")),
                      str(s.get("occupancy", {}).get("hosts", "")),
                      str(c.get("forwarded", "")), str(c.get("dropped", "")),
                      str(s.get("rejected", "")), s.get("message", "") or "")
    console.print(table)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add controller, apply and status."""
    app.command("controller")(controller_cmd)
    app.command("apply")(apply_cmd)
    app.command("status")(status_cmd)
