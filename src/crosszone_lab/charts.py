"""Charts for plan and simulate results, drawn with matplotlib's non-interactive Agg backend.

Each function takes results and an output stem and writes `<stem>.png` and `<stem>.svg` (PNG for
docs and chat, SVG for slides). They return the paths written; they print nothing.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on gateways and CI runners

import matplotlib.pyplot as plt
import numpy as np

from crosszone.plan.capacity import CapacityPlan
from crosszone.plan.fluid import SimulationResult

__all__ = ["chart_paths", "plan_chart", "simulate_chart"]

_COLOURS = ("#8c8c8c", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e")


def chart_paths(stem: Path) -> tuple[Path, Path]:
    """The PNG and SVG paths for an output stem ('docs/img/plan' or 'docs/img/plan.png')."""
    base = stem.with_suffix("") if stem.suffix.lower() in (".png", ".svg") else stem
    return base.with_name(base.name + ".png"), base.with_name(base.name + ".svg")


def _save(fig: plt.Figure, stem: Path) -> tuple[Path, Path]:
    png, svg = chart_paths(stem)
    png.parent.mkdir(parents=True, exist_ok=True)
    # Fixed metadata keeps the SVG byte-stable between runs (no date in it).
    fig.savefig(png, dpi=120, metadata={"Software": None})
    fig.savefig(svg, metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return png, svg


def plan_chart(plan: CapacityPlan, stem: Path) -> tuple[Path, Path]:
    """Bars per platform: devices, rack units, power and hardware cost for the planned demand."""
    names = [p.name for p in plan.platforms]
    colours = [_COLOURS[i % len(_COLOURS)] for i in range(len(names))]
    panels: tuple[tuple[str, list[float], str], ...] = (
        ("devices", [p.devices for p in plan.platforms], "{:.0f}"),
        ("rack units", [p.rack_u for p in plan.platforms], "{:.0f} U"),
        ("power (kW)", [p.power_w / 1000 for p in plan.platforms], "{:.1f}"),
        (f"hardware cost (k{plan.currency})", [p.cost / 1000 for p in plan.platforms], "{:.0f}"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(13, 3.8))
    for ax, (title, values, fmt) in zip(axes, panels, strict=True):
        bars = ax.bar(names, values, color=colours)
        ax.set_title(title)
        ax.tick_params(axis="x", labelrotation=20)
        for bar, value in zip(bars, values, strict=True):
            ax.annotate(
                fmt.format(value),
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                ha="center",
                va="bottom",
                fontsize=9,
            )
        ax.margins(y=0.15)
    redundancy = f"N+{plan.spares}" if plan.spares else "N"
    fig.suptitle(
        f"Gateway tier for {plan.demand_gbps:g} Gbps peak "
        f"({plan.headroom:.0%} headroom, {redundancy}, mean frame {plan.mix.mean_bytes:.0f} B)"
    )
    fig.tight_layout()
    return _save(fig, stem)


def simulate_chart(result: SimulationResult, stem: Path) -> tuple[Path, Path]:
    """Step time breakdown per tier, small-request delay, and the CDF of dataset load times."""
    tiers = result.tiers
    names = [t.name for t in tiers]
    fig, (ax_step, ax_delay, ax_cdf) = plt.subplots(1, 3, figsize=(14, 4.2))

    compute = np.array([t.compute_s for t in tiers])
    wait = np.array([t.data_wait_s for t in tiers])
    # The remainder of the mean step is the amortised checkpoint stall.
    stall = np.array([t.step_s for t in tiers]) - compute - wait
    ax_step.bar(names, compute, color="#c7c7c7", label="compute")
    ax_step.bar(names, wait, bottom=compute, color="#1f77b4", label="waiting for data")
    ax_step.bar(
        names, stall, bottom=compute + wait, color="#d62728", label="checkpoint (amortised)"
    )
    ax_step.set_title("mean step time (s)")
    ax_step.legend(fontsize=8)
    ax_step.tick_params(axis="x", labelrotation=15)

    x = np.arange(len(tiers))
    ax_delay.bar(x - 0.2, [t.small_delay_mean_us for t in tiers], 0.4, label="mean")
    ax_delay.bar(x + 0.2, [t.small_delay_p99_us for t in tiers], 0.4, label="p99")
    ax_delay.set_xticks(x, names, rotation=15)
    ax_delay.set_yscale("log")
    ax_delay.set_title("small-request delay (us)")
    ax_delay.legend(fontsize=8)

    for i, tier in enumerate(tiers):
        loads = np.sort(np.asarray(tier.load_times_s))
        if loads.size:
            cdf = np.arange(1, loads.size + 1) / loads.size
            ax_cdf.step(
                loads, cdf, where="post", color=_COLOURS[(i + 1) % len(_COLOURS)], label=tier.name
            )
    if tiers:
        ax_cdf.axvline(
            tiers[0].ideal_load_s, color="black", linestyle=":", label="no-gateway bound (mean)"
        )
    ax_cdf.set_title("dataset load per step: CDF")
    ax_cdf.set_xlabel("seconds until the slowest server has its data")
    ax_cdf.legend(fontsize=8)

    fig.suptitle(
        f"{result.scenario}: {result.servers} GPU servers, {result.peak_gbps:g} Gbps peak, "
        f"{result.duration_s / 3600:g} h simulated"
    )
    fig.tight_layout()
    return _save(fig, stem)


def register(app: object, bench_app: object) -> None:
    """Give `crosszone plan --chart` and `crosszone simulate --chart` their writers (the product's
    plan commands hold the option and never import the lab)."""
    from crosszone.plan.commands import CHART_WRITERS

    CHART_WRITERS.update(plan=plan_chart, simulate=simulate_chart)
