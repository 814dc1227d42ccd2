"""The figures of the section "Does BN reduce internal covariate shift?": one line per configuration
(mean over finished seeds) of each view's measurement vs step."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bnexp.report.build import Report
from bnexp.report.figures import pyplot, save_figure
from bnexp.report.groups import ConfigGroup, bn_variant
from bnexp.report.ics_stats import REL_LANDSCAPE_KEYS, distribution_series, gradient_series, landscape_series
from bnexp.report.load import Run

_VARIANT_STYLE = {"BN": "-", "noisy BN": "-.", "no BN": "--"}


def mean_by_step(series: list[tuple[list[int], list[float | None]]]) -> tuple[list[int], list[float]]:
    """Mean over seeds at every step of per-seed (steps, values) series (finite values only)."""
    by_step: dict[int, list[float]] = {}
    for steps, vals in series:
        for st, v in zip(steps, vals):
            if v is not None and math.isfinite(v):
                by_step.setdefault(int(st), []).append(float(v))
    steps = sorted(by_step)
    return steps, [float(np.mean(by_step[s])) for s in steps]


def _ics_groups(report: Report, view: str) -> list[tuple[ConfigGroup, list[Run]]]:
    """The configurations with data for ``view`` and their finished runs."""
    out = []
    for g, s in zip(report.groups, report.data["configurations"]):
        if s.get("ics") and s["ics"].get(view):
            out.append((g, [r for r in g.runs if r.status == "finished"]))
    return out


def _ics_line(ax, i: int, g: ConfigGroup, steps: list[int], vals: list[float], n: int) -> None:
    plt = pyplot()
    ax.plot(steps, vals, color=plt.get_cmap("tab10")(i % 10), linestyle=_VARIANT_STYLE.get(bn_variant(g) or "", "-"),
            marker="o" if len(steps) < 3 else None, label=f"{g.variant_label or g.label} (n={n})")


def _ics_figure(report: Report, path: Path, view: str, panels: list[tuple[str, str, Any]], title: str,
                log: bool = False) -> None:
    """One ICS figure: a panel per (key, y label, per-run series function), one line per configuration.

    Args:
        log: log y-scale on a panel whose plotted values are all positive.
    """
    plt = pyplot()
    confs = _ics_groups(report, view)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    for ax, (key, ylabel, fn) in zip(axes[0], panels):
        drawn = []
        for i, (g, runs) in enumerate(confs):
            series = [fn(r) for r in runs]
            steps, vals = mean_by_step([s for s in series if s[0]])
            if steps:
                _ics_line(ax, i, g, steps, vals, sum(1 for s in series if s[0]))
                drawn.extend(vals)
        if log and drawn and min(drawn) > 0:
            ax.set_yscale("log")
        ax.set_title(ylabel, fontsize=9)
        ax.set_xlabel("training step")
        ax.grid(alpha=0.3)
        if not drawn:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        axes[0][-1].legend(handles, labels, fontsize=7)
    fig.suptitle(title + " (mean over finished seeds; BN solid, noisy BN dash-dot, no BN dashed)", fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, 100)


def plot_ics_distribution(report: Report, path: Path) -> None:
    """ics_distribution.png: the BN paper's view -- Wasserstein-1 distance of each layer's input
    distribution from its first record (step 0), averaged over layers, vs step."""
    _ics_figure(report, path, "distribution",
                [("w1_first", "per-unit W1(now, step 0) of the layers' inputs, mean over layers",
                  distribution_series)],
                "Distribution view (BN paper): how far the input distributions moved from their start")


def plot_ics_gradient(report: Report, path: Path) -> None:
    """ics_gradient.png: Santurkar et al.'s gradient-based ICS (Def. 2.1), layers 2..K averaged:
    the relative ||G - G'||_2 / ||G||_2 (left) and cos(G, G') (right) vs step."""
    _ics_figure(report, path, "gradient",
                [("l2_rel", "||G - G'|| / ||G||, layers 2..K", lambda r: gradient_series(r)[:2]),
                 ("cos", "cos(G, G'), layers 2..K", lambda r: (gradient_series(r)[0], gradient_series(r)[2]))],
                "Gradient-based ICS (Santurkar et al. 2018, Def. 2.1)")


def plot_ics_landscape(report: Report, path: Path) -> None:
    """ics_landscape.png: loss variation, gradient predictiveness and beta-smoothness along the
    gradient (Santurkar et al. 2018, Sec. 3.1, Fig. 4) in the scale-invariant parametrization (steps
    relative to each tensor's norm, the one verdicts use) vs step; log y-scale where all positive."""
    panels = [(k, title, (lambda r, k=k: (landscape_series(r)[0], landscape_series(r)[1][k])))
              for k, title in zip(REL_LANDSCAPE_KEYS, ("loss variation", "gradient predictiveness (l2 change)",
                                                       "effective beta-smoothness"))]
    _ics_figure(report, path, "landscape", panels,
                "Loss landscape along the gradient, scale-invariant steps (Santurkar et al. 2018)", log=True)


ICS_PLOTS = {"ics_distribution.png": plot_ics_distribution, "ics_gradient.png": plot_ics_gradient,
             "ics_landscape.png": plot_ics_landscape}
