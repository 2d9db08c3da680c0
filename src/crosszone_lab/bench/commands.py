"""`crosszone bench ...`: every benchmark's command in one place. Each prints JSON lines; none
is a test, and each compares against a baseline measured in the same run."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from crosszone.progress import Progress

if TYPE_CHECKING:
    from crosszone_lab.emulate.deploy import Deployment


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
    policy_only: bool = typer.Option(False, "--policy-only",
                                     help="Only the traffic policy's on/off scenarios."),
) -> None:
    """Per-packet cost of the fast path vs a MAC-swap floor and an LPM-trie baseline, and of
    the traffic policy on vs off (JSON)."""
    from crosszone_lab.bench.fastpath import run_bench

    _need_root("the benchmark loads BPF programs")
    with Progress("bench fastpath") as p:
        p.step(f"{routes} routes, {hosts} hosts, {rounds} rounds of {repeat} runs per scenario")
        run_bench(routes, hosts, repeat, rounds, emit=_line_emitter(p), policy_only=policy_only)


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
    from crosszone_lab.bench.control import run

    with Progress("bench control") as p:
        for kind in stores.split(","):
            p.step(f"{kind} store: {routes} routes, {hosts} hosts, {changes} changes")
            print(json.dumps(run(kind, routes, hosts, changes, not verbose_hosts)), flush=True)


def bench_forward(
    as_json: bool = typer.Option(True, "--json/--no-json",
                                 help="JSON lines (the only output format)."),
    seconds: float = typer.Option(1.0, "--seconds", min=0.2, max=60.0,
                                  help="measured time per row and round"),
    rounds: int = typer.Option(5, "--rounds", min=1, max=50,
                               help="interleaved rounds of every row (medians)"),
    cpu: int = typer.Option(-1, "--cpu", help="CPU to pin to (default: the last)"),
    sender: str = typer.Option("af_xdp", "--sender",
                               help="af_xdp (copy mode), tx_ring (AF_PACKET transmit ring), "
                                    "sendmmsg, or live_frames (a BPF test run, where the kernel "
                                    "allows it)"),
) -> None:
    """MTU-size VXLAN through one legacy, one crosszone and one floor gateway (same
    generator): pps, Gbps, CPU ns per forwarded packet, corrupted/misrouted counts."""
    from crosszone_lab.bench.forward import SENDERS, check_sender, run_bench, teardown

    _need_root("the emulator creates network namespaces")
    if sender not in SENDERS:
        Console(stderr=True).print(f"error: --sender {sender!r}: one of {', '.join(SENDERS)}",
                                   markup=False)
        raise typer.Exit(2)
    check_sender(sender)
    with Progress("bench forward") as p:
        p.step(f"{rounds} rounds of {seconds:g} s per row (generator, floor, crosszone, legacy;"
               f" sender {sender})")
        try:
            run_bench(seconds=seconds, cpu=None if cpu < 0 else cpu, rounds=rounds,
                      sender=sender)
        finally:
            p.step("removing the benchmark's namespaces")
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
            progress.step(f"simulating {servers} servers for {duration} through "
                          f"{tier.name} x {tier.devices}")
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

    with Progress("bench simulate") as progress:
        _run(action)


def _emitter(progress: Progress) -> Callable[[dict[str, Any]], None]:
    """Print a result object as a JSON line on stdout and say so on stderr."""
    return _line_emitter(progress, json.dumps)


def _line_emitter(progress: Progress, render: Callable[[Any], str] = str
                  ) -> Callable[[Any], None]:
    """Print a result line on stdout and say so on stderr."""
    def emit(item: Any) -> None:
        line = render(item)
        _print_line(line)
        progress.step(f"measured {_what(line)}")
    return emit


def _what(line: str) -> str:
    """A short name for one result line: the values of the keys that name a row."""
    try:
        doc = json.loads(line)
    except ValueError:
        return "a result"
    if not isinstance(doc, dict):
        return "a result"
    keys = ("scenario", "row", "kind", "gateway", "event", "tier", "mode", "store", "policy")
    return " ".join(str(doc[k]) for k in keys if isinstance(doc.get(k), str | int)) or "a result"


def bench_policy(
    as_json: bool = typer.Option(True, "--json/--no-json", help="JSON lines (the only format)."),
    rounds: int = typer.Option(3, "--rounds", min=1, max=20,
                               help="interleaved off/on rounds per gateway kind"),
    duration: float = typer.Option(15.0, "--duration", min=5.0, max=300.0,
                                   help="seconds per round"),
    warmup: float = typer.Option(3.0, "--warmup", min=0.0, max=60.0,
                                 help="seconds at the start of a round whose small requests "
                                      "are not timed"),
    gateways: str = typer.Option("crosszone,legacy", "--gateways",
                                 help="gateway kinds, comma-separated"),
) -> None:
    """Small-request latency and bulk goodput with the traffic policy off and on (JSON)."""
    from crosszone_lab.bench.policy import run_bench

    _need_root("the emulator creates network namespaces")
    if warmup >= duration:
        raise typer.BadParameter("--warmup must be shorter than --duration")
    with Progress("bench policy") as p:
        p.step(f"{rounds} off/on rounds of {duration:g} s for {gateways}")
        run_bench(_emitter(p), rounds=rounds, duration=duration, warmup=warmup,
                  gateway_kinds=tuple(k for k in gateways.split(",") if k))


def bench_fairness(
    as_json: bool = typer.Option(True, "--json/--no-json", help="JSON lines (the only format)."),
    rounds: int = typer.Option(2, "--rounds", min=1, max=20),
    duration: float = typer.Option(15.0, "--duration", min=5.0, max=300.0),
    greedy: str = typer.Option("a", "--greedy", help="the greedy tenant's VPC"),
    greedy_loaders: int = typer.Option(6, "--greedy-loaders", min=1, max=16,
                                       help="range readers per endpoint of the greedy tenant"),
    other_loaders: int = typer.Option(2, "--other-loaders", min=1, max=16,
                                      help="range readers per endpoint of the other tenants"),
    rate_mbps: int | None = typer.Option(
        None, "--rate-mbps", min=1,
        help="the greedy tenant's rate per gateway, when on (default: its fair share of the "
             "shaped host ports over the crosszone gateways)"),
    traffic_policy: bool = typer.Option(
        True, "--policy/--no-policy",
        help="the traffic policy (small/bulk marking, strict priority) on in every round"),
) -> None:
    """Two tenants, one greedy: bulk goodput per tenant without and with a per-tenant rate."""
    from crosszone_lab.bench.fairness import run_bench

    _need_root("the emulator creates network namespaces")
    with Progress("bench fairness") as p:
        p.step(f"{rounds} rounds of {duration:g} s, greedy tenant {greedy}")
        run_bench(_emitter(p), rounds=rounds, duration=duration, greedy=greedy,
                  greedy_loaders=greedy_loaders, other_loaders=other_loaders,
                  rate_mbps=rate_mbps,
                  traffic_policy=traffic_policy)


def _csv(value: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise typer.BadParameter(f"{what}: {', '.join(bad) or 'none given'}; "
                                 f"choose from {', '.join(allowed)}")
    return items


def _print_line(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _running_deployment() -> Deployment:
    from crosszone_lab.emulate import deploy, topology
    from crosszone_lab.emulate import state as st

    _need_root("the bench drives the emulated deployment")
    state = st.load()
    if state is None or not state.complete:
        Console(stderr=True).print("[red]error:[/red] no deployment: `crosszone emulate up`")
        raise typer.Exit(2)
    return deploy.make(topology.parse(state.spec, source=str(st.STATE_FILE)))


def bench_failover(
    as_json: bool = typer.Option(True, "--json/--no-json", help="JSON lines (the only format)."),
    kinds: str = typer.Option(
        "legacy,crosszone",
        help="Gateway kinds, comma-separated; legacy-careful is the legacy gateways with a "
             "careful operator's floating static routes (docs/emulate.md)."),
    events: str = typer.Option("all", help="Events, comma-separated (default: all)."),
    trials: int = typer.Option(5, min=1, help="Trials per (kind, event)."),
    rate: float = typer.Option(6000.0, min=100.0,
                               help="Datagrams/s per direction and family."),
    flows: int = typer.Option(64, min=1, help="Source ports per direction and family."),
    detail: Path | None = typer.Option(None, help="Per-trial timelines, JSON lines, to FILE."),
) -> None:
    """Loss window and timeline of gateway failures on the running emulator (JSON)."""
    from crosszone.abi.objects import object_path
    from crosszone_lab.bench import failover
    from crosszone_lab.emulate import failures
    from crosszone_lab.emulate import kinds as gw_kinds

    dep = _running_deployment()
    chosen = _csv(kinds, (*gw_kinds.registry(), failover.LEGACY_CAREFUL), "unknown kind")
    missing = [k for k in chosen
               if not dep.plan.gateways_of("legacy" if k == failover.LEGACY_CAREFUL else k)]
    if missing:
        raise typer.BadParameter(f"no {', '.join(missing)} gateways in this deployment")
    evs = list(failures.EVENTS) if events == "all" else _csv(events, failures.EVENTS,
                                                            "unknown event")
    b = failover.Bench(dep, object_path("xdp_drop"), rate=rate, flows=flows)
    out = detail.open("w") if detail else None

    def to_detail(line: str) -> None:
        if out is not None:
            out.write(line + "\n")
            out.flush()

    try:
        with Progress("bench failover") as p:
            p.step(f"{trials} trials of {', '.join(evs)} on {', '.join(chosen)} gateways")
            failover.run(b, chosen, evs, trials, emit=_line_emitter(p), detail=to_detail)
    finally:
        if out:
            out.close()


def bench_switches(
    as_json: bool = typer.Option(True, "--json/--no-json", help="JSON lines (the only format)."),
    count: int = typer.Option(100, min=1, help="Planned switches to run."),
    targets: str = typer.Option("crosszone,legacy", help="Sets to alternate between."),
    rate: float = typer.Option(6000.0, min=100.0,
                               help="Datagrams/s per direction and family."),
    flows: int = typer.Option(64, min=1, help="Source ports per direction and family."),
) -> None:
    """False BFD/BGP flaps and loss over many planned switches under the probe (JSON)."""
    from crosszone.abi.objects import object_path
    from crosszone_lab.bench import failover
    from crosszone_lab.emulate import crosszone_gateway, kinds

    dep = _running_deployment()
    sets = tuple(_csv(targets, tuple(kinds.switch_targets()), "unknown gateway set"))
    b = failover.Bench(dep, object_path("xdp_drop"), rate=rate, flows=flows)
    with Progress("bench switches") as p:
        p.step(f"{count} switches between {', '.join(sets)} under the probe")
        # a time limit's SIGTERM ends the run like Ctrl-C: the switches done so far are reported
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        failover.run_switches(b, count, sets, emit=_line_emitter(p),
                              cli=[crosszone_gateway.crosszone_bin()], step=p.step)


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
    from crosszone.linux import netns
    from crosszone.migrate.plan import parse_dwell, parse_steps
    from crosszone_lab.bench.migrate import run_bench
    from crosszone_lab.emulate import deploy

    _need_root("the emulator creates network namespaces")

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    # a time limit's SIGTERM ends the run like Ctrl-C: the steps done so far are reported
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        summary = run_bench(parse_steps(steps), parse_dwell(dwell), pps, flows, emit=emit,
                            chart=chart)
    finally:
        if down:
            deploy.down(netns.Executor(), log=lambda _m: None)
    if summary["interrupted"]:
        raise typer.Exit(130)


def bench_store_watch(
    as_json: bool = typer.Option(True, "--json/--no-json", help="JSON lines (the only format)."),
    rounds: int = typer.Option(3, min=1, help="Rounds; each runs both modes, in turns."),
    idle: float = typer.Option(5.0, min=0.1, help="Seconds of the idle watch per round."),
    writes: int = typer.Option(200, min=1, help="Writes by another process per round."),
) -> None:
    """The SQLite store's watch, inotify against a 2 ms poll: idle CPU and write-to-watch
    delay (JSON)."""
    from crosszone_lab.bench.store_watch import run

    with Progress("bench store-watch") as p:
        p.step(f"{rounds} rounds: {idle:g} s idle, {writes} writes, each mode")
        run(_emitter(p), rounds, idle, writes)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add every benchmark to `crosszone bench`."""
    bench_app.command("fastpath")(bench_fastpath)
    bench_app.command("forward")(bench_forward)
    bench_app.command("control")(bench_control)
    bench_app.command("simulate")(bench_simulate)
    bench_app.command("policy")(bench_policy)
    bench_app.command("fairness")(bench_fairness)
    bench_app.command("failover")(bench_failover)
    bench_app.command("switches")(bench_switches)
    bench_app.command("migrate")(bench_migrate)
    bench_app.command("store-watch")(bench_store_watch)
