"""The report's main figures: test accuracy vs steps with a zoomed top (Sec. 4.1 Fig. 1(a); on
CIFAR-10 the Sec. 4.2 Fig. 2 form), percentiles of a typical unit's input over training per
setting and BN variant (Fig. 1(b, c)), and per-layer stability of the input distribution.

Each ``*_figure(report)`` returns the matplotlib Figure; :data:`FIGURES` names its file and dpi.
Colours, line styles, labels and paper references follow :mod:`bnexp.report.figstyle`.
"""

from __future__ import annotations

import numpy as np

from bnexp.report.build import Report
from bnexp.report.figstyle import (STEP_LABEL, legend_below, legend_title, pyplot, refs, style_note, styles,
                                   wrap_title)
from bnexp.report.groups import ConfigGroup, bn_variant, pair_key
from bnexp.report.load import Run, Sweep, ordered_keys, seed_order
from bnexp.report.stats import band_keys, numeric

MISSING = {"no BN": "without BN", "BN": "with BN", "noisy BN": "with noisy BN", "configuration": "of unknown BN"}


def accuracy_curve(sweep: Sweep, group: ConfigGroup) -> tuple[list[int], list[float], list[float], list[float]]:
    """Test accuracy vs step over the completed seeds: (steps, mean, min, max).

    At each evaluated step the mean/min/max are over the seeds evaluated at that step
    (a diverged seed stops contributing where its metrics end).
    """
    m = sweep.metrics[sweep.metrics["run"].isin([r.id for r in group.completed])]
    acc = numeric(m.get("test_accuracy", [])).set_axis(m.index)
    curve = acc.groupby(m["step"].astype(int)).agg(["mean", "min", "max"]).dropna()
    return curve.index.tolist(), curve["mean"].tolist(), curve["min"].tolist(), curve["max"].tolist()


def zoom_range(curves: list[tuple[list[float], list[float]]], near: float = 10.0,
               min_span: float = 1.0) -> tuple[float, float] | None:
    """The y range (low, high) in % of the zoomed accuracy panel (None without data): the top of
    the range, where the curves are told apart. ``curves``: per configuration (means, maxima over
    seeds) in %; configurations whose final mean is within ``near`` points of the best one are
    inside the zoom (not e.g. a plain network still at chance); the span is at least ``min_span``."""
    finals = [m[-1] for m, _ in curves if m]
    if not finals:
        return None
    top = max(max(h) for _, h in curves if h)
    best = max(finals)
    low = min(f for f in finals if f >= best - near)
    span = max(min_span, top - low)
    return low - 0.35 * span, min(100.0, top + 0.15 * span)


def accuracy_figure(report: Report):
    """Fig. 1(a) (Sec. 4.1) / Fig. 2 form (Sec. 4.2): test accuracy (%) vs training step; left the
    whole range, right its top (:func:`zoom_range`). One line per configuration (mean over the
    completed seeds), min-max band shaded; one legend below."""
    plt = pyplot()
    st = styles(report.groups)
    fig, (ax, zax) = plt.subplots(1, 2, figsize=(11, 5.2), gridspec_kw={"width_ratios": [1, 1]})
    curves, zoom_curves = [], []
    for g in report.groups:
        steps, mean, lo, hi = accuracy_curve(report.sweep, g)
        if not steps:
            continue
        mean, lo, hi = (100 * np.asarray(v) for v in (mean, lo, hi))
        s = st[g.key]
        for a in (ax, zax):
            a.plot(steps, mean, color=s.color, linestyle=s.linestyle, linewidth=1.6,
                   label=f"{s.label} (n={len(g.completed)})" if a is ax else None)
            a.fill_between(steps, lo, hi, color=s.color, alpha=0.15, linewidth=0)
        curves.append((list(mean), list(hi)))
        zoom_curves.append((steps, mean))
    ax.set_title("whole range", fontsize=9)
    zr = zoom_range(curves)
    if zr is None:
        for a in (ax, zax):
            a.text(0.5, 0.5, "no completed runs with metrics.jsonl", ha="center", va="center",
                   transform=a.transAxes, fontsize=8)
        zax.set_title("top of the range (zoom)", fontsize=9)
    else:
        zax.set_ylim(*zr)
        # x from the last evaluation before a curve enters the zoomed range
        first = [next((steps[max(0, k - 1)] for k, m in enumerate(mean) if m >= zr[0]), None)
                 for steps, mean in zoom_curves]
        first = [f for f in first if f is not None]
        last = max(s[-1] for s, _ in zoom_curves)
        x0 = min(first) if first and min(first) < last else min(s[0] for s, _ in zoom_curves)
        if x0 < last:
            zax.set_xlim(x0 - 0.02 * (last - x0), last + 0.02 * (last - x0))
        zax.set_title(f"top of the range (zoom): {zr[0]:.1f}-{zr[1]:.1f}%", fontsize=9)
        from matplotlib.patches import Rectangle

        x_lo, x_hi = zax.get_xlim()
        ax.add_patch(Rectangle((x_lo, zr[0]), x_hi - x_lo, zr[1] - zr[0], fill=False, edgecolor="gray",
                               linewidth=0.8, linestyle="-", label=None))
    for a in (ax, zax):
        a.set_xlabel(STEP_LABEL)
        a.set_ylabel("test accuracy (%)")
        a.grid(alpha=0.3)
    fig.suptitle(f"Test accuracy vs training steps ({refs(report.data)['accuracy']})", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    bottom = legend_below(fig, handles, labels,
                          title=legend_title("mean over seeds, band min-max", style_note(report.groups)))
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


def lowest_seed_shift(sweep: Sweep, group: ConfigGroup) -> Run | None:
    """The completed run with the lowest seed whose shift.jsonl records hold the typical unit."""
    runs = [r for r in group.completed if any(c.startswith("unit.") for c in sweep.rows("shift", r).columns)]
    return min(runs, key=seed_order) if runs else None


def figure_rows(groups: list[ConfigGroup]) -> tuple[list[str], list[dict[str, ConfigGroup]]]:
    """(column names, rows as {column: configuration}) of the percentile figure: one row per
    setting (:func:`pair_key`), one column per BN variant present (no BN, BN, noisy BN, then unknown
    ones). Two configurations of one setting and variant (two BN presets) go to separate rows."""
    order = ["no BN", "BN", "noisy BN", "configuration"]
    present = {bn_variant(g) or "configuration" for g in groups}
    columns = [c for c in order if c in present]
    rows: list[dict[str, ConfigGroup]] = []
    row_of: dict[str, list[int]] = {}
    for g in groups:
        col, pk = bn_variant(g) or "configuration", pair_key(g)
        idx = next((i for i in row_of.get(pk, []) if col not in rows[i]), None)
        if idx is None:
            rows.append({})
            idx = len(rows) - 1
            row_of.setdefault(pk, []).append(idx)
        rows[idx][col] = g
    return columns, rows


def _percentile_panel(ax, sweep: Sweep, group: ConfigGroup, label: str) -> bool:
    """One panel of Fig. 1(b, c): the typical unit's median and 15-85 band over steps, of the
    configuration's lowest seed; False (the panel says so) without shift.jsonl records."""
    from matplotlib.ticker import MaxNLocator

    run = lowest_seed_shift(sweep, group)
    rows = sweep.rows("shift", run) if run else None
    keys = band_keys(c[5:] for c in rows.columns if c.startswith("unit.")) if run else None
    if keys is None:
        ax.set_title(f"{label}\nno shift.jsonl records", fontsize=8)
        return False
    (lo, mid, hi), steps = keys, rows["step"].tolist()
    ax.fill_between(steps, numeric(rows[f"unit.{lo}"]), numeric(rows[f"unit.{hi}"]), alpha=0.3, color="C0",
                    linewidth=0, label=f"{lo[1:]}-{hi[1:]}th percentile band")
    ax.plot(steps, numeric(rows[f"unit.{mid}"]), color="C0", label=f"median ({mid[1:]}th)",
            marker="o" if len(rows) < 3 else None)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    index, layer = (rows[f"unit.{k}"].iloc[0] if f"unit.{k}" in rows else None for k in ("index", "layer"))
    index = int(index) if isinstance(index, (int, float)) and np.isfinite(index) else index
    ax.set_title(f"{label}\nseed {run.seed}, unit {index} of {layer}", fontsize=8)
    return True


def percentiles_figure(report: Report):
    """Fig. 1(b, c) (Sec. 4.1): percentiles of the input to a typical last-hidden-layer unit over
    training, one row per setting and one column per BN variant (:func:`figure_rows`), y axis
    shared within a row; a missing variant has no panel (the title says which are missing)."""
    plt = pyplot()
    st = styles(report.groups)
    columns, rows = figure_rows(report.groups)
    if not rows:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, "no configurations", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    ncol = len(columns)
    fig, axes = plt.subplots(len(rows), ncol, figsize=(max(4.6 * ncol, 6.5), 2.9 * len(rows) + 1.3),
                             squeeze=False)
    handles: list = []
    labels: list[str] = []
    for row, ax_row in zip(rows, axes):
        missing = [c for c in columns if c not in row]
        for col, ax in zip(columns, ax_row):
            g = row.get(col)
            if g is None:
                ax.set_visible(False)
                continue
            label = st[g.key].label + (f" (no run {' or '.join(MISSING[c] for c in missing)} with these "
                                       "settings)" if missing else "")
            if not _percentile_panel(ax, report.sweep, g, wrap_title(label, 58)):
                ax.set_axis_off()
                continue
            if not handles:
                handles, labels = ax.get_legend_handles_labels()
            ax.set_xlabel(STEP_LABEL, fontsize=8)
            ax.set_ylabel("input to the nonlinearity\n(pre-activation, a.u.)", fontsize=8)
            ax.grid(alpha=0.3)
        drawn = [a for a in ax_row if a.get_visible() and a.axison]
        if len(drawn) > 1:  # one y scale per row: no BN and BN of a setting compare directly
            lims = [a.get_ylim() for a in drawn]
            for a in drawn:
                a.set_ylim(min(lo for lo, _ in lims), max(hi for _, hi in lims))
    fig.suptitle(f"A typical unit of the last hidden layer over training ({refs(report.data)['percentiles']})",
                 fontsize=10)
    bottom = legend_below(fig, handles, labels)
    fig.tight_layout(rect=(0, bottom, 1, 0.97))
    return fig


def stability_figure(report: Report):
    """Per-layer stability bars (Fig. 1(b, c) in numbers): |median_end - median_first| of each
    hidden layer's input to the nonlinearity and its 15-85 spread ratio end / first, mean over
    finished seeds; one bar per configuration."""
    plt = pyplot()
    st = styles(report.groups)
    confs = [(g, s) for g, s in zip(report.groups, report.data["configurations"]) if s["stability"]]
    layers = ordered_keys(s["stability"] for _, s in confs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4 + 0.22 * len(confs)), squeeze=False)
    metrics = (("median_shift", "how far the median moved", "|median end - median first|\n(pre-activation, a.u.)"),
               ("spread_ratio", "how the 15-85 spread changed", "15-85 spread, end / first\n(ratio; 1 = unchanged)"))
    for ax, (key, title, ylabel) in zip(axes[0], metrics):
        ax.set_title(title, fontsize=9)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xlabel("hidden layer (input to output)", fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        if not confs:
            ax.text(0.5, 0.5, "no shift.jsonl records", ha="center", va="center", transform=ax.transAxes)
            continue
        width = 0.8 / len(confs)
        for i, (g, s) in enumerate(confs):
            vals = [s["stability"].get(layer, {}).get(key) for layer in layers]
            xs = [j - 0.4 + width * (i + 0.5) for j in range(len(layers))]
            sty = st[g.key]
            ax.bar(xs, [np.nan if v is None else v for v in vals], width, color=sty.color, hatch=sty.hatch,
                   edgecolor="black", linewidth=0.4, label=sty.label)
        ax.set_xticks(range(len(layers)), layers)
        if key == "spread_ratio":
            ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
    fig.suptitle(f"How far each layer's input distribution moved, first to last monitor step "
                 f"({refs(report.data)['stability']})", fontsize=10)
    handles, labels = axes[0][0].get_legend_handles_labels()
    bottom = legend_below(fig, handles, labels,
                          title=legend_title("mean over finished seeds", style_note(report.groups, bars=True)))
    fig.tight_layout(rect=(0, bottom, 1, 0.96))
    return fig


FIGURES = {"accuracy_vs_steps.png": (accuracy_figure, 110), "percentiles.png": (percentiles_figure, 100),
           "stability.png": (stability_figure, 100)}  # file name -> (figure of a report, dpi)
