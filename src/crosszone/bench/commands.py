"""`crosszone bench ...`: every benchmark's command in one place. Each prints JSON lines; none
is a test, and each compares against a baseline measured in the same run."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console


def _need_root(what: str) -> None:
    if os.geteuid() != 0:
        Console(stderr=True).print(f"[red]error:[/red] {what}: run as root")
        raise typer.Exit(2)


def bench_fastpath(
    as_json: bool = typer.Option(True, "--json/--no-json", help="JSON lines (the only format)."),
    routes: int = typer.Option(1_000_000, help="Routes per family."),
    hosts: int = typer.Option(100_000, help="Hosts for the return scenario."),
    repeat: int = typer.Option(300_000, help="Iterations per measurement."),
    rounds: int = typer.Option(15, help="Interleaved rounds per scenario (median, best reported)."),
) -> None:
    """Per-packet cost of the fast path vs a MAC-swap floor and an LPM-trie baseline (JSON)."""
    from crosszone.bench.fastpath import run_bench

    _need_root("the benchmark loads BPF programs")
    run_bench(routes, hosts, repeat, rounds,
              emit=lambda s: (sys.stdout.write(s + "\n"), sys.stdout.flush()))


def bench_control(
    as_json: bool = typer.Option(True, "--json", help="JSON lines (the only format)."),
    routes: int = typer.Option(1_000_000, "--routes"),
    hosts: int = typer.Option(100_000, "--hosts"),
    changes: int = typer.Option(200, "--changes"),
    stores: str = typer.Option("sqlite,etcd", "--stores"),
    verbose_hosts: bool = typer.Option(False, "--verbose-hosts",
                                       help="Hosts as YAML mappings, not hosts_compact."),
) -> None:
    """Validate+compile, program, restart and single-change latency for each store."""
    from crosszone.bench.control import run

    for kind in stores.split(","):
        print(json.dumps(run(kind, routes, hosts, changes, not verbose_hosts)), flush=True)


def bench_forward(
    as_json: bool = typer.Option(True, "--json/--no-json",
                                 help="JSON lines (the only output format)."),
    seconds: float = typer.Option(2.0, "--seconds", min=0.5, max=60.0,
                                  help="measured time per row and round"),
    rounds: int = typer.Option(3, "--rounds", min=1, max=20,
                               help="interleaved rounds of every row (medians)"),
    cpu: int = typer.Option(-1, "--cpu", help="CPU to pin to (default: the last)"),
) -> None:
    """MTU-size VXLAN through one legacy, one crosszone and one floor gateway (same
    generator): pps, Gbps, CPU ns per forwarded packet, corrupted/misrouted counts."""
    from crosszone.bench.forward import run_bench, teardown

    _need_root("the emulator creates network namespaces")
    try:
        run_bench(seconds=seconds, cpu=None if cpu < 0 else cpu, rounds=rounds)
    finally:
        teardown()


def bench_simulate(
    servers: Annotated[int, typer.Option(help="GPU servers.")] = 10000,
    duration: Annotated[str, typer.Option(help="Simulated time.")] = "1h",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON lines (one per tier).")
    ] = False,
) -> None:
    """Time the fluid simulation at cluster scale: one line per tier (x86, Tofino-class).

    Each tier is its own simulation of `servers` servers over `duration`, timed by wall clock
    and by the process's CPU time (which the machine's other load does not inflate).
    """
    from crosszone.plan.commands import _console, _run
    from crosszone.plan.fluid import simulate_tier
    from crosszone.plan.scenario import cluster_scale_mapping, scenario_from_mapping
    from crosszone.plan.units import PlanInputError, parse_duration_s

    def action() -> None:
        if servers <= 0:
            raise PlanInputError("--servers", "", f"must be positive, got {servers}")
        parse_duration_s(duration, "--duration")
        parsed = scenario_from_mapping(cluster_scale_mapping(servers, duration), "bench")
        simulated = parsed.duration
        for tier in parsed.tiers:
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            result = simulate_tier(parsed, tier, parsed.seed)
            wall = time.perf_counter() - wall_start
            cpu = time.process_time() - cpu_start
            line = {
                "servers": servers,
                "simulated_s": int(simulated) if simulated.is_integer() else simulated,
                "tier": f"{tier.name} x {tier.devices}",
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "flows": result.streams,
                "flows_per_wall_s": round(result.streams / wall) if wall > 0 else None,
                "python": sys.version.split()[0],
            }
            if as_json:
                print(json.dumps(line), flush=True)
            else:
                _console().print(line)

    _run(action)


def bench_migrate(
    as_json: bool = typer.Option(True, "--json/--no-json", help="JSON lines (the only format)."),
    steps: str = typer.Option("1,10,25,50,100", "--steps"),
    dwell: str = typer.Option("8s", "--dwell", help="dwell per step (and canary, and drain)"),
    pps: float = typer.Option(2000.0, "--pps", min=100, help="UDP probe, per family"),
    flows: int = typer.Option(16, "--flows", min=1, max=1024, help="UDP flows per family"),
    down: bool = typer.Option(True, "--down/--keep", help="take the deployment down after"),
    chart: Path | None = typer.Option(None, "--chart", help="PNG: weight and traffic per "
                                      "gateway kind over the run (docs/img/migrate.png)"),
) -> None:
    """Migration legacy -> crosszone and back under the workload and a UDP probe: one line per
    step (lost, failed requests, gap, converge_ms), then a summary."""
    from crosszone.bench.migrate import run_bench
    from crosszone.emulate import deploy
    from crosszone.linux import netns
    from crosszone.migrate.plan import parse_dwell, parse_steps

    _need_root("the emulator creates network namespaces")
    try:
        run_bench(parse_steps(steps), parse_dwell(dwell), pps, flows,
                  emit=lambda s: (sys.stdout.write(s + "\n"), sys.stdout.flush()), chart=chart)
    finally:
        if down:
            deploy.down(netns.Executor(), log=lambda _m: None)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add every benchmark to `crosszone bench`."""
    bench_app.command("fastpath")(bench_fastpath)
    bench_app.command("forward")(bench_forward)
    bench_app.command("control")(bench_control)
    bench_app.command("simulate")(bench_simulate)
    bench_app.command("migrate")(bench_migrate)
