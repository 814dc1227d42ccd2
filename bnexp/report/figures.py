"""The figures of Sec. 4.1 (Fig. 1): test accuracy vs steps, percentiles of a typical unit's input
over training (no BN | BN), and per-layer stability of the input distribution."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np

from bnexp.report.build import Report
from bnexp.report.groups import ConfigGroup, match_no_bn, pair_key
from bnexp.report.load import Run, ordered_keys, seed_order
from bnexp.report.stats import band_keys
from bnexp.rundir import atomic_write_bytes


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend (imported on first use: the report's
    tables need no matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _colors(groups: list[ConfigGroup]) -> dict[str, Any]:
    """One color per BN/no-BN pair (pair_key), shared by the figures."""
    plt = pyplot()
    cmap = plt.get_cmap("tab10" if len(groups) <= 20 else "tab20")
    keys: list[str] = []
    for g in groups:
        if pair_key(g) not in keys:
            keys.append(pair_key(g))
    return {k: cmap(i % cmap.N) for i, k in enumerate(keys)}


def save_figure(fig, path: Path, dpi: int) -> None:
    """Write ``fig`` as PNG to ``path`` at ``dpi``, atomically, and close it.

    The PNG is drawn in memory and then written to a temporary file in the same folder that
    replaces ``path`` (``os.replace``, :func:`bnexp.rundir.atomic_write_bytes`): a reader or an
    interrupted report never sees half a figure, and a failure leaves the previous file as it was.

    Raises:
        OSError: when ``path`` cannot be written (``path`` is then unchanged).
    """
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        pyplot().close(fig)
    atomic_write_bytes(path, buf.getvalue())


def accuracy_curve(group: ConfigGroup) -> tuple[list[int], list[float], list[float], list[float]]:
    """Test accuracy vs step over the completed seeds: (steps, mean, min, max).

    At each evaluated step the mean/min/max are over the seeds evaluated at that step
    (a diverged seed stops contributing where its metrics end).
    """
    by_step: dict[int, list[float]] = {}
    for r in group.completed:
        for rec in r.metrics:
            acc = rec.get("test_accuracy")
            if isinstance(acc, (int, float)) and math.isfinite(acc):
                by_step.setdefault(int(rec["step"]), []).append(float(acc))
    steps = sorted(by_step)
    return (steps, [float(np.mean(by_step[s])) for s in steps], [min(by_step[s]) for s in steps],
            [max(by_step[s]) for s in steps])


def plot_accuracy(report: Report, path: Path) -> None:
    """Fig. 1(a) (Sec. 4.1): test accuracy vs steps, one line per configuration (mean over seeds),
    min-max band over seeds shaded; BN solid, no BN dashed; the Sec. 4.2 target dotted."""
    plt = pyplot()
    colors = _colors(report.groups)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    drawn = 0
    for g in report.groups:
        steps, mean, lo, hi = accuracy_curve(g)
        if not steps:
            continue
        c = colors[pair_key(g)]
        style = ("-." if g.noisy else "-") if g.bn else "--"
        ax.plot(steps, mean, color=c, linestyle=style, label=f"{g.label} (n={len(g.completed)})")
        ax.fill_between(steps, lo, hi, color=c, alpha=0.15, linewidth=0)
        drawn += 1
    sec42 = report.data.get("sec42")
    if sec42 and sec42.get("target") is not None:
        ax.axhline(sec42["target"], color="gray", linestyle=":", linewidth=1,
                   label=f"baseline best {100 * sec42['target']:.2f}%")
    if not drawn:
        ax.text(0.5, 0.5, "no completed runs with metrics.jsonl", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("training step")
    ax.set_ylabel("test accuracy")
    noisy = "; noisy BN dash-dot" if any(g.noisy for g in report.groups) else ""
    ax.set_title(f"Test accuracy vs steps (mean over seeds, min-max band); BN solid, no BN dashed{noisy}",
                 fontsize=9)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7, loc="lower right" if drawn <= 8 else "upper left",
                  bbox_to_anchor=None if drawn <= 8 else (1.01, 1.0))
    fig.tight_layout()
    save_figure(fig, path, 110)


def figure_pairs(groups: list[ConfigGroup]) -> list[tuple[ConfigGroup | None, ConfigGroup | None]]:
    """Rows of the paired figures: (no-BN configuration, BN configuration), either may be None."""
    rows: list[tuple[ConfigGroup | None, ConfigGroup | None]] = []
    used: set[str] = set()
    for g in groups:
        if g.bn is True:
            nb = match_no_bn(g, groups)
            rows.append((nb, g))
            used.update({g.key} | ({nb.key} if nb else set()))
    rows.extend((g, None) for g in groups if g.key not in used and g.bn is not True)
    return rows


def lowest_seed_shift(group: ConfigGroup) -> Run | None:
    """The completed run with the lowest seed that has shift.jsonl records."""
    runs = [r for r in group.completed if r.shift and isinstance(r.shift[0].get("unit"), dict)]
    return min(runs, key=seed_order) if runs else None


def _short(text: str, width: int = 60) -> str:
    """``text`` wrapped onto lines of at most ``width`` characters (figure titles)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _percentile_panel(ax, group: ConfigGroup | None, side: str) -> None:
    """One panel of Fig. 1(b, c): the typical unit's median line and 15-85 band over steps.

    Args:
        ax: the matplotlib axes.
        group: the configuration (None: the sweep has none for this side).
        side: "no BN" or "BN" (used in the title).
    """
    from matplotlib.ticker import MaxNLocator

    run = lowest_seed_shift(group) if group else None
    if run is None:
        why = ({"no BN": "no run without BN", "BN": "no run with BN"}.get(side, f"no {side} run")
               + " with these settings" if group is None else "no shift.jsonl records")
        ax.text(0.5, 0.5, why, ha="center", va="center", transform=ax.transAxes, fontsize=8)
        ax.set_title(_short(f"{side}: {group.label}") if group else side, fontsize=8)
        ax.set_xticks([])
        return
    recs = [r for r in run.shift if isinstance(r.get("unit"), dict) and band_keys(r["unit"])]
    lo, mid, hi = band_keys(recs[0]["unit"])
    steps = [r["step"] for r in recs]
    ax.fill_between(steps, [r["unit"].get(lo, np.nan) for r in recs], [r["unit"].get(hi, np.nan) for r in recs],
                    alpha=0.3, label=f"{lo}-{hi}")
    ax.plot(steps, [r["unit"].get(mid, np.nan) for r in recs], label=mid, marker="o" if len(recs) < 3 else None)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    u = recs[0]["unit"]
    ax.set_title(_short(f"{side}: {group.label}") + f"\nseed {run.seed}, unit {u.get('index')} of {u.get('layer')}",
                 fontsize=8)
    ax.set_xlabel("step")
    ax.legend(fontsize=7)


def plot_percentiles(report: Report, path: Path) -> None:
    """Fig. 1(b, c) (Sec. 4.1): percentiles of the input to a typical last-hidden-layer unit over
    training; per row one setting, no BN (left) beside BN (right) with a shared y axis; the run
    shown is the configuration's lowest seed."""
    plt = pyplot()
    rows = figure_pairs(report.groups) or [(None, None)]
    fig, axes = plt.subplots(len(rows), 2, figsize=(9, 3.1 * len(rows)), sharey="row", squeeze=False)
    for (nb, bn), (ax0, ax1) in zip(rows, axes):
        _percentile_panel(ax0, nb, "no BN")
        _percentile_panel(ax1, bn, "BN")
        ax0.set_ylabel("input to nonlinearity")
        for ax in (ax0, ax1):
            ax.grid(alpha=0.3)
    fig.suptitle("Typical unit of the last hidden layer: median and 15-85 percentile band (no BN | BN)",
                 fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, 100)


def plot_stability(report: Report, path: Path) -> None:
    """Per-layer bars (Sec. 4.1): |median_end - median_first| and the 15-85 spread ratio end/first,
    mean over finished seeds, one bar per configuration (BN solid, no BN hatched)."""
    plt = pyplot()
    colors = _colors(report.groups)
    confs = [(g, s) for g, s in zip(report.groups, report.data["configurations"]) if s["stability"]]
    layers = ordered_keys(s["stability"] for _, s in confs)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.0 + 0.25 * len(confs)), squeeze=False)
    metrics = (("median_shift", "|median end - median first|"), ("spread_ratio", "15-85 spread: end / first"))
    for ax, (key, title) in zip(axes[0], metrics):
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
        if not confs:
            ax.text(0.5, 0.5, "no shift.jsonl records", ha="center", va="center", transform=ax.transAxes)
            continue
        width = 0.8 / len(confs)
        for i, (g, s) in enumerate(confs):
            vals = [s["stability"].get(layer, {}).get(key) for layer in layers]
            xs = [j - 0.4 + width * (i + 0.5) for j in range(len(layers))]
            ax.bar(xs, [np.nan if v is None else v for v in vals], width, color=colors[pair_key(g)],
                   hatch=None if g.bn else "//", edgecolor="black", linewidth=0.4, label=g.label)
        ax.set_xticks(range(len(layers)), layers)
        if key == "spread_ratio":
            ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
    fig.suptitle("How far each layer's input distribution moved between the first and last monitor step "
                 "(BN solid, no BN hatched)", fontsize=9)
    bottom = 0.0
    if confs:
        ncol = min(3, len(confs))
        nrows = -(-len(confs) // ncol)
        bottom = min(0.5, 0.06 + 0.05 * nrows)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    save_figure(fig, path, 100)
