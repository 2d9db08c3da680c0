"""`crosszone demo` (make demo): what crosszone does, in two parts.

1. The fast path alone: the example intent's tables in the real XDP program, a pcap of sample
   traffic through it, and a table of verdicts, reasons and rewritten headers.
2. The emulated two-zone deployment: the same AI storage workload through legacy x86-style
   kernel gateways, then, after a BGP switch, through crosszone gateways; a side-by-side table.
   Then queues at the bottleneck ports and the same workload with the traffic policy off and
   on: small requests' latency next to bulk goodput.
3. One gateway core, forwarding only: the same MTU-size VXLAN stream through a legacy gateway,
   a crosszone gateway and a bare XDP forwarder (the machine's limit). On a 2-core box the whole
   emulation in part 2 saturates the CPUs, so end-to-end throughput shows parity; this part
   shows what each gateway costs per packet, which is what sizes a fleet.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from crosszone.abi.objects import is_checkout
from crosszone.linux.environment import describe, is_environment_problem

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
# A checkout's examples/, else the copy an installed wheel carries beside this module (setup.py).
EXAMPLES = ROOT / "examples" if is_checkout() else Path(__file__).resolve().parent / "examples"
EXAMPLE_INTENT = EXAMPLES / "gateway.yaml"


def fastpath_demo(console: Console) -> int:
    """Part 1: sample frames through the kernel program. Returns the number of frames."""
    from crosszone_lab.pcap_run import run_pcap
    from crosszone_lab.sample_traffic import write_pcap

    console.rule("[bold]1. the XDP fast path, programmed from examples/gateway.yaml")
    labels: list[str] = []
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="crosszone-demo-") as tmp:
        # Each frame enters on the port it would arrive on: tenants' VXLAN on compute0, the
        # storage nodes' replies on storage0 (a reply on the compute port is refused).
        for port in ("compute0", "storage0"):
            pcap, out = Path(tmp) / f"{port}.pcap", Path(tmp) / f"{port}-out.pcap"
            labels += write_pcap(pcap, ingress=port)
            rows += run_pcap(EXAMPLE_INTENT, pcap, out, ingress=port)
    table = Table(
        title="each sample frame through the real program (BPF_PROG_TEST_RUN)", show_lines=False
    )
    for col in ("frame", "verdict", "reason", "egress", "bytes out", "headers out"):
        table.add_column(col, overflow="fold")
    colour = {"redirect": "green", "tx": "green", "pass": "yellow", "drop": "red"}
    for label, r in zip(labels, rows):
        v = f"[{colour.get(r['verdict'], 'white')}]{r['verdict']}[/]"
        table.add_row(
            label,
            v,
            r["reason"],
            r["egress"] or "-",
            str(r["len"]),
            r["summary"] if r["verdict"] in ("redirect", "tx") else "",
        )
    console.print(table)
    console.print(
        "forwarded: decapsulated, source translated into the tenant's storage-facing "
        "prefix, TTL-1, new MACs; replies translated back and wrapped in VXLAN with "
        "the tenant's VNI. Everything else: the kernel (pass) or a counted drop."
    )
    return len(rows)


def forwarding_demo(console: Console, seconds: float = 1.0) -> dict[str, dict]:
    """Part 3: per-core forwarding of each gateway kind (crosszone_lab.bench.forward)."""
    from crosszone_lab.bench.forward import run_bench, teardown

    console.rule("[bold]3. one gateway core, forwarding only (same generator for every kind)")
    rows: list[dict] = []
    try:
        run_bench(seconds=seconds, emit=rows.append, rounds=4)
    finally:
        teardown()
    by = {r["gateway"]: r for r in rows if "gateway" in r}
    table = Table(title="MTU-size (1514-byte) VXLAN frames, one core, every frame validated")
    for col in ("gateway", "Mpps (with generator)", "Gbps", "gateway ns / packet",
                "Mpps per gateway core", "corrupted", "misrouted"):
        table.add_column(col, justify="right")
    for kind in ("legacy", "crosszone", "floor"):
        r = by.get(kind)
        if r:
            table.add_row(kind, f"{r['pps'] / 1e6:.2f}", f"{r['gbps']:.2f}",
                          f"{r.get('gateway_ns_per_pkt', 0):.0f}",
                          f"{r.get('gateway_core_mpps', 0):.2f}", str(r["corrupted"]),
                          str(r["misrouted"]))
    console.print(table)
    x, leg, fl = (by.get(k, {}).get("gateway_core_mpps") for k in ("crosszone", "legacy", "floor"))
    if x and leg and fl:
        console.print(f"Per gateway core (the generator's own cost, measured alone, taken off): "
                      f"crosszone forwards {x / leg:.1f}x the packets of the kernel gateway, at "
                      f"{x / fl:.0%} of a bare XDP forwarder.")
    return by


def forwarding_problems(by: dict[str, dict]) -> list[str]:
    """What fails part 3: a crosszone or floor row missing, or any of their frames corrupted or
    misrouted. (The legacy row is the baseline: reported in the table, never failing.)"""
    problems = []
    for kind in ("crosszone", "floor"):
        r = by.get(kind)
        if r is None:
            problems.append(f"{kind}: no forwarding row")
        elif r.get("corrupted", 0) or r.get("misrouted", 0):
            problems.append(f"{kind}: {r.get('corrupted')} corrupted, "
                            f"{r.get('misrouted')} misrouted frames")
    return problems


class PartFailed(Exception):
    """A demo part failed through crosszone (not through the machine): the demo fails."""


def run_part(console: Console, part: str, body: Callable[[], T]) -> T | None:
    """Run one part of the demo. A part the machine cannot run (an environment problem: a
    kernel feature refused, a tool missing) is reported in one line and skipped: None. Any
    other failure is crosszone's: reported in one line, then PartFailed."""
    try:
        return body()
    except Exception as exc:
        if is_environment_problem(exc):
            console.print(f"[yellow]part {part} cannot run on this machine, going on:[/yellow] "
                          f"{escape(describe(exc))}")
            return None
        console.print(f"[red]part {part} failed:[/red] {escape(type(exc).__name__)}: "
                      f"{escape(' '.join(str(exc).split()))}")
        raise PartFailed(part) from exc


def demo(
    quick: bool = typer.Option(False, "--quick", help="Only part 1 (no emulated deployment)."),
    duration: float = typer.Option(20.0, help="Seconds of workload per gateway kind."),
    verbose: bool = typer.Option(False, "--verbose", "--json",
                                 help="Also print each workload run's raw JSON document."),
) -> None:
    """Show crosszone working: the fast path on sample frames, then both zones emulated."""
    # Tables are wide: give them room when the output goes to a file or a CI log.
    console = Console(emoji=False, width=None if sys.stdout.isatty() else 150)
    if os.geteuid() != 0:
        console.print(
            "[red]error:[/red] the demo loads BPF programs and builds namespaces: "
            "run it as root (sudo make demo)"
        )
        raise typer.Exit(2)
    failed: list[str] = []

    def part(name: str, body: Callable[[], T]) -> T | None:
        try:
            return run_part(console, name, body)
        except PartFailed:
            failed.append(name)
            return None

    part("1", lambda: fastpath_demo(console))
    if not quick:
        from crosszone_lab.emulate.demo import run_demo

        def emulated() -> int:
            console.rule("[bold]2. two zones emulated: legacy kernel gateways vs crosszone")
            return run_demo(console, duration=duration, verbose=verbose)

        if part("2", emulated):
            failed.append("2")
        by = part("3", lambda: forwarding_demo(console))
        for problem in forwarding_problems(by) if by is not None else []:
            console.print(f"[red]forwarding: {escape(problem)}[/red]")
            failed.append("3")
    if failed:
        console.print(f"[red]demo: part {', '.join(sorted(set(failed)))} failed[/red]")
    raise typer.Exit(1 if failed else 0)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add `crosszone demo`."""
    app.command("demo")(demo)
