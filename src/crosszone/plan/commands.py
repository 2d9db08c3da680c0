"""`crosszone plan`, `crosszone simulate` and `crosszone bench simulate`: the plan plane's CLI.

This is the only module of the plane that reads files, prints, or looks at the clock (for the
benchmark's wall time). User errors (PlanInputError) become one line on stderr and exit status 2,
never a traceback.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from crosszone.plan.capacity import DEFAULT_HEADROOM, CapacityPlan, parse_packet_mix, plan_capacity
from crosszone.plan.catalog import Catalog, apply_fastpath_bench, load_catalog, read_fastpath_bench
from crosszone.plan.fluid import SimulationResult, simulate
from crosszone.plan.published import Comparison, compare_published
from crosszone.plan.scenario import load_scenario
from crosszone.plan.table_fit import PlatformFit, TableCounts, counts_from_intent, fit_tables
from crosszone.plan.units import (
    PlanInputError,
    parse_rate_gbps,
    parse_redundancy,
    parse_share,
)

__all__ = ["register"]

_T = TypeVar("_T")
_DEFAULT_CATALOG = Path("examples/catalog.yaml")

#: The chart writers of `--chart`, by command ("plan", "simulate"). They draw with matplotlib, a
#: lab dependency, so the lab adds them when its commands register (crosszone_lab/charts.py); the
#: product never imports the lab. Each takes the result and an output stem, returns the paths.
CHART_WRITERS: dict[str, Callable[[Any, Path], tuple[Path, ...]]] = {}


def _chart_writer(command: str, chart: Path) -> Callable[[Any, Path], tuple[Path, ...]]:
    """The writer for `command`'s --chart, or a PlanInputError naming the extra that draws it."""
    writer = CHART_WRITERS.get(command)
    if writer is None:
        raise PlanInputError("--chart", str(chart),
                             "charts are drawn by the lab: install crosszone[lab]")
    return writer


def _read(path: Path) -> str:
    """Read a user-named file, turning OS errors into a PlanInputError naming the file."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanInputError(str(path), "", f"cannot read: {exc.strerror or exc}") from None


def _run(action: Callable[[], _T]) -> _T:
    """Run `action`; a PlanInputError is printed as one line and exits with status 2."""
    try:
        return action()
    except PlanInputError as exc:
        Console(stderr=True, highlight=False).print(f"error: {exc}", markup=False)
        raise typer.Exit(code=2) from None


def _load_catalog(path: Path, bench: Path | None) -> Catalog:
    catalog = load_catalog(_read(path), str(path))
    if bench is not None:
        rates = read_fastpath_bench(_read(bench).splitlines(), str(bench))
        catalog = apply_fastpath_bench(catalog, rates, str(bench))
    return catalog


def _demand(demand: str | None, servers: int | None, server_rate: str | None) -> float:
    if demand is not None:
        if servers is not None or server_rate is not None:
            raise PlanInputError(
                "--demand", "", "give --demand or --servers/--server-rate, not both"
            )
        return parse_rate_gbps(demand, "--demand")
    if servers is None or server_rate is None:
        raise PlanInputError(
            "--demand",
            "",
            "missing: give --demand (e.g. 2Tbps) or both --servers and --server-rate",
        )
    if servers < 0:
        raise PlanInputError("--servers", "", f"must not be negative, got {servers}")
    return servers * parse_rate_gbps(server_rate, "--server-rate")


def _counts(
    vpcs: int | None, routes: int | None, hosts: int | None, intent: Path | None
) -> TableCounts | None:
    given = {"vpcs": vpcs, "routes": routes, "hosts": hosts}
    if intent is not None:
        if any(v is not None for v in given.values()):
            raise PlanInputError(
                "--intent", "", "give --intent or --vpcs/--routes/--hosts, not both"
            )
        if not intent.is_file():
            raise PlanInputError(str(intent), "", "cannot read: no such file")
        return counts_from_intent(str(intent))
    if all(v is None for v in given.values()):
        return None
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise PlanInputError(
            f"--{missing[0]}",
            "",
            "missing: the table check needs --vpcs, --routes and --hosts together",
        )
    return TableCounts.from_mapping(given, "command line")


def _console() -> Console:
    """A console that is wide enough for the tables when output goes to a file or a pipe."""
    return Console(width=None if sys.stdout.isatty() else 150)


def _fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def _plan_table(plan: CapacityPlan) -> Table:
    redundancy = f"N+{plan.spares}" if plan.spares else "N"
    table = Table(
        title=f"Gateway tier for {plan.demand_gbps:,.0f} Gbps peak ({plan.headroom:.0%} headroom, "
        f"{redundancy}, mean frame {plan.mix.mean_bytes:.0f} B)"
    )
    for column in (
        "platform",
        "Gbps/device",
        "bound by",
        "devices",
        "rack U",
        "power kW",
        f"hardware {plan.currency}",
        "util. at peak",
        "headroom left",
        "util. spares down",
    ):
        table.add_column(column, justify="left" if column in ("platform", "bound by") else "right")
    for p in plan.platforms:
        table.add_row(
            p.name,
            f"{p.capacity_gbps:,.1f}",
            p.limit,
            str(p.devices),
            f"{p.rack_u:g}",
            f"{p.power_w / 1000:,.1f}",
            _fmt_int(p.cost),
            f"{p.utilisation:.1%}",
            f"{p.headroom_left:.1%}",
            f"{p.utilisation_degraded:.1%}",
        )
    return table


def _cost_lines(plan: CapacityPlan) -> list[str]:
    """Each tier's hardware cost against the baseline tier's, then where every price comes from.

    The ratio is only as good as the two prices it divides, so their sources are printed with it.
    """
    base = plan.baseline()
    if base is None:
        return []
    lines = [
        f"Hardware cost against {base.name} for {plan.demand_gbps:,.0f} Gbps: "
        f"{base.devices} x {_fmt_int(base.price)} = {_fmt_int(base.cost)} {plan.currency}"
    ]
    for p in plan.platforms:
        ratio = plan.cost_ratio(p)
        if p is base or ratio is None:
            continue
        lines.append(
            f"  {p.name}: {p.devices} x {_fmt_int(p.price)} = {_fmt_int(p.cost)} {plan.currency}, "
            f"{ratio:.1%} of it ({ratio - 1:+.1%})"
        )
    lines.append("Price sources:")
    for p in plan.platforms:
        lines.append(f"  {p.name}: {p.sources.get('price', 'none given')}")
    return lines


def _fit_table(fits: tuple[PlatformFit, ...]) -> Table:
    table = Table(title="Do the tables fit? (share of entries left to the slow path)")
    table.add_column("platform")
    for name in ("vpcs", "routes", "hosts"):
        table.add_column(f"{name} (need / limit)", justify="right")
    table.add_column("fits")
    table.add_column("slow path", justify="right")
    for fit in fits:
        cells = []
        for t in fit.tables:
            limit = "memory" if t.limit is None else _fmt_int(t.limit)
            cells.append(f"{_fmt_int(t.needed)} / {limit}")
        table.add_row(
            fit.name, *cells, "yes" if fit.fits else "NO", f"{fit.worst_slow_path_share:.1%}"
        )
    return table


def _sim_table(result: SimulationResult) -> Table:
    table = Table(
        title=f"{result.scenario}: {result.servers} GPU servers, "
        f"{result.peak_gbps:,.0f} Gbps peak, "
        f"{result.duration_s / 3600:g} h simulated, seed {result.seed}"
    )
    columns = (
        "tier",
        "dataset load s (no-gateway bound)",
        "worst load s",
        "checkpoint stall s (bound)",
        "small req. mean / p99 us",
        "step s",
        "training h",
        "worst collision",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "tier" else "right")
    for t in result.tiers:
        table.add_row(
            t.name,
            f"{t.dataset_load_s:.3f} ({t.ideal_load_s:.3f})",
            f"{t.dataset_load_max_s:.3f}",
            f"{t.checkpoint_stall_s:.2f} ({t.ideal_checkpoint_s:.2f})",
            f"{t.small_delay_mean_us:,.1f} / {t.small_delay_p99_us:,.1f}",
            f"{t.step_s:.3f}",
            f"{t.training_s / 3600:,.1f}",
            f"{t.worst_collision} streams",
        )
    return table


def _percent(share: float | None, digits: int = 1) -> str:
    """A reduction as the sources write it: 0.9 -> '-90.0 %'."""
    return "" if share is None else f"{-share * 100:+.{digits}f} %"


def _digits(share: float) -> int:
    """Decimals a published percentage was given with (0.9 -> 0, 0.225 -> 1), at most 2."""
    for digits in range(3):
        if abs(round(share * 100, digits) - share * 100) < 1e-9:
            return digits
    return 2


def _published_table(comparison: Comparison) -> Table:
    """Published reductions next to simulated ones, with the two tiers' own values."""
    table = Table(
        title=f"Reductions, {comparison.baseline} -> {comparison.candidate}: "
        "published vs simulated",
        caption=f"published: {comparison.source}",
    )
    for column in ("figure", "published", "simulated", comparison.baseline, comparison.candidate):
        table.add_column(column, justify="left" if column == "figure" else "right")
    for f in comparison.figures:
        values = [
            "" if v is None else f"{v:,.{3 if f.unit == 's' else 1}f} {f.unit}"
            for v in (f.baseline_value, f.candidate_value)
        ]
        simulated = _percent(f.simulated) if f.simulated is not None else f.note
        # Published figures as the source rounds them (-90 %), simulated ones to a tenth.
        published = _percent(f.published, 0 if f.published is None else _digits(f.published))
        table.add_row(f.figure, published, simulated, *values)
    return table


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    """Add `plan` and `simulate` to `app` and `simulate` to `bench_app`."""

    @app.command("plan")
    def plan_command(
        demand: Annotated[
            str | None, typer.Option(help="Peak cross-zone demand, e.g. 2Tbps.")
        ] = None,
        servers: Annotated[
            int | None, typer.Option(help="GPU servers (with --server-rate).")
        ] = None,
        server_rate: Annotated[
            str | None, typer.Option(help="Peak rate per server, e.g. 50Gbps.")
        ] = None,
        headroom: Annotated[str, typer.Option(help="Headroom over the peak.")] = (
            f"{DEFAULT_HEADROOM:.0%}"
        ),
        redundancy: Annotated[str, typer.Option(help="Spare devices: N, N+1, N+2.")] = "N",
        packet_mix: Annotated[
            str, typer.Option(help="Frame sizes by packet count: 1514, imix, 64:7,576:4,1514:1.")
        ] = "large",
        catalog: Annotated[
            Path, typer.Option(help="Catalog YAML of platforms.")
        ] = _DEFAULT_CATALOG,
        fastpath_bench: Annotated[
            Path | None, typer.Option(help="`crosszone bench fastpath --json` output (JSON lines).")
        ] = None,
        vpcs: Annotated[int | None, typer.Option(help="VPCs, for the table check.")] = None,
        routes: Annotated[int | None, typer.Option(help="Routes, for the table check.")] = None,
        hosts: Annotated[int | None, typer.Option(help="Hosts, for the table check.")] = None,
        intent: Annotated[
            Path | None, typer.Option(help="Intent file to count tables from.")
        ] = None,
        chart: Annotated[Path | None, typer.Option(help="Write STEM.png and STEM.svg.")] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print JSON instead of tables.")
        ] = False,
    ) -> None:
        """Size the gateway tier of every catalog platform for a peak demand."""

        def action() -> None:
            gbps = _demand(demand, servers, server_rate)
            cat = _load_catalog(catalog, fastpath_bench)
            plan = plan_capacity(
                cat,
                gbps,
                headroom=parse_share(headroom, "--headroom"),
                spares=parse_redundancy(redundancy),
                mix=parse_packet_mix(packet_mix),
            )
            counts = _counts(vpcs, routes, hosts, intent)
            fits = fit_tables(cat, counts) if counts is not None else None
            written: tuple[Path, ...] = ()
            if chart is not None:
                written = _chart_writer("plan", chart)(plan, chart)
            if as_json:
                out: dict[str, Any] = plan.to_json()
                if fits is not None:
                    by_name = {f.name: f.to_json() for f in fits}
                    for entry in out["platforms"]:
                        entry["tables"] = by_name[entry["name"]]
                print(json.dumps(out))
                return
            console = _console()
            console.print(_plan_table(plan))
            for line in _cost_lines(plan):
                # Soft wrap: a source is one line, whole, for the reader to copy or grep.
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            if fits is not None:
                console.print(_fit_table(fits))
            for path in written:
                console.print(f"chart: {path}")

        _run(action)

    @app.command("simulate")
    def simulate_command(
        scenario: Annotated[Path, typer.Argument(help="Scenario YAML (see examples/scenarios/).")],
        seed: Annotated[int | None, typer.Option(help="Override the scenario's seed.")] = None,
        policy: Annotated[bool | None, typer.Option(
            "--policy/--no-policy",
            help="Traffic policy on or off (overrides the scenario's `policy.enabled`).",
        )] = None,
        chart: Annotated[Path | None, typer.Option(help="Write STEM.png and STEM.svg.")] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="Print JSON instead of a table.")
        ] = False,
    ) -> None:
        """Fluid simulation of training traffic through each gateway tier of a scenario."""

        def action() -> None:
            parsed = load_scenario(_read(scenario), str(scenario))
            if policy is not None:
                parsed = parsed.with_policy(policy)
            result = simulate(parsed, seed)
            comparison = compare_published(parsed, result)
            written: tuple[Path, ...] = ()
            if chart is not None:
                written = _chart_writer("simulate", chart)(result, chart)
            if as_json:
                out = result.to_json()
                if comparison is not None:
                    out["published"] = comparison.to_json()
                print(json.dumps(out))
                return
            console = _console()
            console.print(_sim_table(result))
            if comparison is not None:
                console.print(_published_table(comparison))
            for path in written:
                console.print(f"chart: {path}")

        _run(action)

    @app.command("simulate-validate")
    def simulate_validate_command(
        rate_mbit: Annotated[
            float, typer.Option(help="Shaped rate of each emulated gateway, Mbit/s.")
        ] = 200.0,
        congestion: Annotated[
            str, typer.Option(help="TCP congestion control of the flows (bbr, cubic, reno).")
        ] = "bbr",
        as_json: Annotated[
            bool, typer.Option("--json", help="Print one JSON line per mix.")
        ] = False,
    ) -> None:
        """Compare the fluid model with a small emulated tier (root; czval-* namespaces)."""
        from crosszone.plan.validation import ValidationError, run_validation

        try:
            run = run_validation(rate_mbit=rate_mbit, congestion=congestion)
        except ValidationError as exc:
            Console(stderr=True, highlight=False).print(f"error: {exc}", markup=False)
            raise typer.Exit(code=2) from None
        if as_json:
            for mix in run.mixes:
                print(json.dumps(mix.to_json()), flush=True)
            return
        console = _console()
        console.print(
            f"{len(run.mixes)} mixes, 2 gateways shaped to {run.rate_mbit:g} Mbit/s "
            f"(unshaped the tier forwards {run.unshaped_gbps:.2f} Gbps), {run.congestion}; "
            f"goodput factor {run.goodput_factor:.3f} from one calibration flow: model capacity "
            f"{run.capacity_gbps * 1e3:.1f} Mbit/s per gateway"
        )
        for mix in run.mixes:
            table = Table(title=f"{mix.mix}: {mix.description}")
            for column in ("flow", "MiB", "gateway", "start ms", "emulated s", "model s", "error"):
                table.add_column(column, justify="left" if column == "flow" else "right")
            for f in mix.flows:
                table.add_row(
                    f.name,
                    f"{f.size_bytes / 2**20:g}",
                    str(f.gateway),
                    f"{f.start_s * 1e3:.1f}",
                    f"{f.measured_s:.3f}",
                    f"{f.model_s:.3f}",
                    f"{f.rel_error:+.1%}",
                )
            table.add_row(
                "batch",
                "",
                "",
                "",
                f"{mix.measured_batch_s:.3f}",
                f"{mix.model_batch_s:.3f}",
                f"{mix.batch_rel_error:+.1%}",
            )
            console.print(table)
            console.print(json.dumps(mix.to_json()), markup=False, highlight=False)
