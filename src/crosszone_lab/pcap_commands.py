"""`crosszone fastpath run`: every packet of a pcap through the real program (or the reference
model) with an intent's tables. The lab's, because reading and writing pcaps needs scapy; it joins
the product's `fastpath` group when the lab is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer
from rich.table import Table

from crosszone.fastpath.commands import _fail, console, fastpath_app
from crosszone.intent.errors import InvalidIntentError

JSON_KEYS = ("index", "verdict", "reason", "egress", "len")


def run_cmd(
    intent: Path = typer.Option(..., "--intent", help="Intent YAML whose tables are loaded."),
    pcap: Path = typer.Option(..., "--pcap", help="Input pcap of Ethernet frames."),
    out: Path = typer.Option(..., "--out", help="Output pcap: the forwarded frames as rewritten."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per packet."),
    ingress: str = typer.Option(
        "", "--ingress", help="Intent interface the frames arrive on (XDP_TX detection)."
    ),
    model: bool = typer.Option(
        False,
        "--model",
        help="Use the Python reference model instead of the kernel program (no root needed).",
    ),
    gateway: str = typer.Option(
        "", "--gateway", help="Gateway of the intent to run (needed when it has several)."
    ),
) -> None:
    """Run every packet of a pcap through the real program with an intent's tables."""
    from crosszone_lab.pcap_run import run_pcap

    try:
        rows = run_pcap(intent, pcap, out, ingress=ingress or None, use_model=model,
                        gateway=gateway or None)
    except InvalidIntentError as exc:
        _fail(str(exc))
        return
    except (OSError, ValueError) as exc:
        _fail(f"{pcap}: {exc}")
        return
    if as_json:
        for r in rows:
            sys.stdout.write(json.dumps({k: r[k] for k in JSON_KEYS}) + "\n")
        return
    table = Table(title=f"{pcap} through the {'model' if model else 'XDP program'}")
    for col in ("#", "verdict", "reason", "egress", "len", "output"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            str(r["index"]),
            r["verdict"],
            r["reason"],
            r["egress"] or "-",
            str(r["len"]),
            r["summary"],
        )
    console.print(table)
    console.print(f"forwarded frames written to {out}")



def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add `run` to the product's fastpath group."""
    fastpath_app.command("run")(run_cmd)
