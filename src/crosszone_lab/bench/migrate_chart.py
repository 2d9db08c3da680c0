"""The chart of a measured migration: weight and traffic per gateway kind over time.

`Sampler` reads every gateway's forwarded-packet counter twice a second while the benchmark
runs (the fast path's fwd_* reasons, a kernel gateway's forwarded datagrams); `draw` plots the
share announced to the new kind above the packets per second each kind forwarded.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on CI runners

import matplotlib.pyplot as plt

from crosszone.linux.netns import CommandFailed
from crosszone_lab.emulate.deploy import Deployment
from crosszone_lab.emulate.migration import forwarded_packets

COLOURS = {"legacy": "#8c8c8c", "crosszone": "#1f77b4"}


class Sampler(threading.Thread):
    """Packets per second forwarded by each gateway kind, sampled until stopped."""

    def __init__(self, dep: Deployment, period_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.dep, self.period_s = dep, period_s
        self.rows: list[dict[str, Any]] = []
        self.missed = 0  # samples whose read failed
        self.halt = threading.Event()

    def _counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for gw in self.dep.plan.gateways:
            out[gw.kind] = out.get(gw.kind, 0) + forwarded_packets(self.dep, gw)
        return out

    def run(self) -> None:
        """Sample until halt is set. A read that fails is a missing sample, not the end of the
        chart: a kernel gateway's counters come from an `nft` child, which Ctrl-C's SIGINT
        reaches too (the process group's), and the next sample spans the gap."""
        prev: dict[str, int] | None = None
        tprev = 0.0
        while True:
            try:
                now, t = self._counts(), time.time()
            except (CommandFailed, OSError, ValueError):
                self.missed += 1
            else:
                if prev is not None:
                    self.rows.append({"t": t, **{k: (now[k] - prev.get(k, 0)) / (t - tprev)
                                                 for k in now}})
                prev, tprev = now, t
            if self.halt.wait(self.period_s):
                return


def draw(rows: list[dict[str, Any]], moves: list[tuple[float, str, int]], t0: float,
         out: Path) -> Path:
    """Weight on crosszone (top) and packets/s per kind (bottom) against seconds from t0."""
    fig, (ax_w, ax_p) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True,
                                     gridspec_kw={"height_ratios": [1, 2]})
    xs, ys = [0.0], [0.0]
    for t, label, w in moves:
        share = w if label.endswith("->crosszone") else 100 - w
        xs += [t - t0, t - t0]
        ys += [ys[-1], share]
    if rows:
        xs.append(rows[-1]["t"] - t0)
        ys.append(ys[-1])
    ax_w.plot(xs, ys, color=COLOURS["crosszone"])
    ax_w.set_ylabel("crosszone\nweight %")
    ax_w.set_ylim(-5, 105)
    for kind, colour in COLOURS.items():
        ax_p.plot([r["t"] - t0 for r in rows], [r.get(kind, 0) for r in rows], color=colour,
                  label=f"{kind} gateways")
    ax_p.set_ylabel("packets/s forwarded")
    ax_p.set_xlabel("seconds")
    ax_p.legend(loc="upper right")
    ax_w.set_title("crosszone bench migrate: legacy -> crosszone, then back")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
