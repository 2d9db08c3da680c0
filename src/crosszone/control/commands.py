"""`crosszone controller`, `crosszone apply FILE [--dry-run]`, `crosszone status`, `crosszone top`.

Everything printed that comes from a file, the controller or the store (names, messages,
errors) goes through rich.markup.escape: a `[/x]` in a pool name or an agent's message is
text, not markup (rich reads an unmatched closing tag as markup and ends the command with a
MarkupError).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
DEFAULT_URL = "http://127.0.0.1:8470"
DEFAULT_STORE = "sqlite:///var/lib/crosszone/state.db"
DEFAULT_MAX_BODY = 64 << 20  # = control.api.DEFAULT_MAX_BODY (not imported: keeps the CLI light)


def _fail(msg: str) -> None:
    Console(stderr=True).print(f"[red]error:[/red] {escape(msg)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


TOKEN_ARGV = ("a token on the command line is visible to every user (ps, /proc); "
              "give it in CROSSZONE_TOKEN or in a file with --token-file")


def read_token(token_file: Path | None, argv_token: str | None) -> str:
    """The API token: from --token-file if given, else CROSSZONE_TOKEN; never from argv."""
    if argv_token is not None:
        _fail(TOKEN_ARGV)
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as exc:
            _fail(f"--token-file {token_file}: {exc.strerror or exc}")
    return os.environ.get("CROSSZONE_TOKEN", "").strip()


# Refuses a value with TOKEN_ARGV (kept, hidden, so an old script fails with the way out).
_ARGV_TOKEN = typer.Option(None, "--token", hidden=True, help=TOKEN_ARGV)
_TOKEN_FILE = typer.Option(None, "--token-file", envvar="CROSSZONE_TOKEN_FILE",
                           help="File holding the API token (else CROSSZONE_TOKEN).")


def controller_cmd(
    store: str = typer.Option(DEFAULT_STORE, "--store", envvar="CROSSZONE_STORE",
                              help="sqlite:///path.db (default) or "
                                   "etcd://[user@]host:port[,host:port...]."),
    listen: str = typer.Option("127.0.0.1:8470", "--listen", help="host:port of the API."),
    token_file: Path | None = _TOKEN_FILE,
    argv_token: str | None = _ARGV_TOKEN,
    max_body: int = typer.Option(DEFAULT_MAX_BODY, "--max-body", min=1024,
                                 help="Largest request body in bytes (larger: 413)."),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="PEM certificate: serve https."),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="PEM private key of --tls-cert."),
    reads: str = typer.Option("open", "--reads",
                              help="open: anyone who reaches the API may read (status, "
                                   "dashboard data); token: reads need the token too."),
    prometheus: str = typer.Option("", "--prometheus", envvar="CROSSZONE_PROMETHEUS",
                                   help="Prometheus URL the dashboard's rates come from."),
    charts: Path | None = typer.Option(None, "--charts",
                                       help="Directory of plan/simulate SVG charts shown on "
                                            "the dashboard."),
) -> None:
    """Serve the REST API (OpenAPI at /openapi.json) and the dashboard (/dashboard)."""
    import uvicorn

    from crosszone.control.api import create_app
    from crosszone.control.service import Controller
    from crosszone.store.store import open_store

    token = read_token(token_file, argv_token)
    if not token:
        _fail("a token is required (CROSSZONE_TOKEN or --token-file)")
    if reads not in ("open", "token"):
        _fail("--reads is open or token")
    if (tls_cert is None) != (tls_key is None):
        _fail("--tls-cert and --tls-key go together")
    if store.startswith("sqlite://"):
        Path(store.removeprefix("sqlite://")).parent.mkdir(parents=True, exist_ok=True)
    try:
        st = open_store(store)
    except ValueError as exc:  # a bad URL, a missing password or TLS file: named in exc
        _fail(f"--store: {exc}")
        return
    ctl = Controller(st)
    if ctl.stored_problem:
        Console(stderr=True).print(f"[yellow]warning:[/yellow] {escape(ctl.stored_problem)}",
                                   highlight=False)
    host, _, port = listen.rpartition(":")
    app = create_app(ctl, token, max_body, open_reads=reads == "open",
                     prometheus=prometheus or None, charts_dir=charts)
    uvicorn.run(app, host=host or "127.0.0.1", port=int(port),
                log_level="warning",
                ssl_certfile=str(tls_cert) if tls_cert else None,
                ssl_keyfile=str(tls_key) if tls_key else None)


def _client(url: str, token: str, ca_cert: Path | None = None):
    from crosszone.control.client import Client

    return Client(url, token, verify=str(ca_cert) if ca_cert else True)


_CA_CERT = typer.Option(None, "--ca-cert", envvar="CROSSZONE_CA_CERT",
                        help="PEM CA (or self-signed certificate) of an https controller.")


def apply_cmd(
    file: Path = typer.Argument(..., help="Intent YAML (version 1 or 2)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the diff, change nothing."),
    url: str = typer.Option(DEFAULT_URL, "--controller", envvar="CROSSZONE_CONTROLLER"),
    token_file: Path | None = _TOKEN_FILE,
    argv_token: str | None = _ARGV_TOKEN,
    ca_cert: Path | None = _CA_CERT,
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Send an intent to the controller (validated there and here first); progress on
    stderr."""
    from crosszone.control.client import ControllerError
    from crosszone.intent.cluster import load_cluster
    from crosszone.intent.errors import InvalidIntentError
    from crosszone.progress import Progress

    token = read_token(token_file, argv_token)
    try:
        with Progress("apply") as progress:
            progress.step(f"validating {file} ({file.stat().st_size / 1e6:.1f} MB)")
            load_cluster(file)
            progress.step(f"sending it to {url}" + (" (dry run)" if dry_run else "")
                          + "; the controller validates and compiles it again")
            out = _client(url, token, ca_cert).apply(file.read_text(), dry_run=dry_run)
    except (InvalidIntentError, ControllerError) as exc:
        _fail(str(exc))
        return
    except OSError as exc:
        _fail(f"{file}: {exc.strerror or exc}")
        return
    if as_json:
        print(json.dumps(out))
        return
    title = "dry run: nothing applied" if dry_run else (
        f"applied as revision {out['revision']}" if out["revision"] else "no change")
    table = Table(title=escape(f"{file}: {title}"))
    for col in ("gateway", "map", "put", "delete"):
        table.add_column(col)
    for gw, d in sorted(out["gateways"].items()):
        if d.get("removed"):
            table.add_row(escape(gw), "(gateway removed from the intent)", "", "")
            continue
        maps = sorted(set(d["put"]) | set(d["delete"]))
        if not maps:
            table.add_row(escape(gw), "(no change)", "0", "0")
        for m in maps:
            table.add_row(*(escape(str(x)) for x in (gw, m, d["put"].get(m, 0),
                                                     d["delete"].get(m, 0))))
    console.print(table)
    console.print(f"store objects changed: {len(out['changed'])}", highlight=False)


def status_cmd(
    url: str = typer.Option(DEFAULT_URL, "--controller", envvar="CROSSZONE_CONTROLLER"),
    token_file: Path | None = _TOKEN_FILE,
    argv_token: str | None = _ARGV_TOKEN,
    ca_cert: Path | None = _CA_CERT,
) -> None:
    """Per-gateway status: revision applied, health, counters (the token, when reads need
    it, from CROSSZONE_TOKEN or --token-file)."""
    from crosszone.control.client import ControllerError
    from crosszone.control.dashboard import in_sync

    try:
        out = _client(url, read_token(token_file, argv_token), ca_cert).status()
    except ControllerError as exc:
        _fail(str(exc))
        return
    want = out["desired_revision"]
    table = Table(title=escape(f"desired revision {want}"))
    for col in ("gateway", "health", "applied", "in sync", "routes", "hosts", "forwarded",
                "dropped", "rejected", "message"):
        table.add_column(col)
    def part(d: dict, key: str) -> dict:
        """A nested part of an agent's report ({} when it is not a mapping: reports come
        from the store, which anything may have written)."""
        v = d.get(key)
        return v if isinstance(v, dict) else {}

    for gw, s in sorted(out["gateways"].items()):
        c, occ = part(s, "counters"), part(s, "occupancy")
        table.add_row(*(escape(str(x)) for x in (
            gw, s.get("health", "?"), s.get("revision"),
            "yes" if in_sync(s.get("revision"), want) else "no",
            occ.get("routes4", ""), occ.get("hosts", ""),
            c.get("forwarded", ""), c.get("dropped", ""), s.get("rejected", ""),
            s.get("message", "") or "")))
    console.print(table)


def top_cmd(
    url: str = typer.Option(DEFAULT_URL, "--controller", envvar="CROSSZONE_CONTROLLER"),
    token_file: Path | None = _TOKEN_FILE,
    ca_cert: Path | None = _CA_CERT,
    interval: float = typer.Option(2.0, "--interval", min=0.5, max=60.0,
                                   help="Seconds between refreshes."),
    once: bool = typer.Option(False, "--once", help="Print one screen and exit."),
) -> None:
    """Live gateways, per-VPC rates, drops by reason and migration, in the terminal."""
    import time

    from rich.live import Live

    from crosszone.control.client import ControllerError
    from crosszone.control.top import render

    client = _client(url, read_token(token_file, None), ca_cert)
    try:
        if once:
            console.print(render(client.dashboard()))
            return
        with Live(render(client.dashboard()), console=console, screen=False,
                  auto_refresh=False) as live:
            while True:
                time.sleep(interval)
                live.update(render(client.dashboard()), refresh=True)
    except ControllerError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add controller, apply, status and top."""
    app.command("controller")(controller_cmd)
    app.command("apply")(apply_cmd)
    app.command("status")(status_cmd)
    app.command("top")(top_cmd)
