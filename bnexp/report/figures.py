"""The report's main figures: test accuracy vs steps with a zoomed top (Sec. 4.1 Fig. 1(a); on
CIFAR-10 the Sec. 4.2 Fig. 2 form), percentiles of a typical unit's input over training per
setting and BN variant (Fig. 1(b, c)), and per-layer stability of the input distribution.

Each ``*_figure(report)`` returns the matplotlib Figure; :data:`FIGURES` names its file and dpi.
Colours, line styles, labels and paper references follow :mod:`bnexp.report.figstyle`.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pandas as pd

from bnexp.report.best_rate import init_of
from bnexp.report.build import Report
from bnexp.report.figstyle import (LINESTYLE, Style, caption, colour_family, family_color,
                                   legend_below, legend_label, legend_title, pyplot, refs, step_label,
                                   style_note, styles, wrap_title)
from bnexp.report.groups import (SCHEDULE_KEYS, ConfigGroup, bn_variant, format_value, kv_label, pair_key, shown_keys,
                                 sort_value)
from bnexp.analysis.runs import Run, Sweep, config_key, numeric, ordered_keys, seed_order
from bnexp.analysis.seed_bands import band_arrays, per_seed, seed_band
from bnexp.analysis.rules import normalizer, normalizer_label, option_text
from bnexp.report.stats import band_keys, config_stability

MAX_LEGEND = 8  # configurations a figure's legend names at most (report.md lists every one)
MIN_WIDTH_IN = 7.5  # inches a figure of panels is at least wide, so that its title wraps to a few lines
MAX_PERCENTILE_ROWS = 2  # settings the percentile figure shows, two rows each: it fits a screen (report.md lists all)


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
    low = min(f for f in finals if f >= max(finals) - near)
    span = max(min_span, top - low)
    return low - 0.35 * span, min(100.0, top + 0.15 * span)


def chosen_groups(report: Report, target: float = 0.95) -> tuple[list[ConfigGroup], str]:
    """The configurations the figures show, as the claims compare them, and a note for the titles: in a held-out
    study (docs/studies/PLAN.md: report.json ``study.tuning_seeds``) those that ran on its evaluation seeds, each at
    its chosen rate; in a held-out MNIST sweep (report.json ``tuning_seeds``, docs/mnist/PLAN.md) each network at
    the rate it chose for ``target`` on the tuning seeds (``best_rate_speedups``); in both, each group keeps only
    its runs on the evaluation seeds (those the claims score). Otherwise every configuration and no note."""
    study, data = report.data.get("study") or {}, report.data
    candidates = []  # (configurations, evaluation seeds, the note's code), the first that ran on its seeds is shown
    if study.get("tuning_seeds"):
        candidates.append((report.groups, study.get("evaluation_seeds"), "study"))
    rows = [r for r in data.get("best_rate_speedups") or [] if abs(r["target"] - target) < 1e-9]
    if data.get("tuning_seeds") and rows:
        chosen = {(r["init"], side, r[f"{key}_lr"]) for r in rows
                  for side, key in ((r["variant"], "bn"), ("no BN", "no_bn"))}
        candidates.append(([g for g in report.groups if g.lr is not None and any(
            abs(g.lr - lr) < 1e-12 for i, side, lr in chosen
            if lr is not None and i == init_of(g.config) and side == normalizer_label(g.config))],
            data.get("evaluation_seeds"), "held_out"))
    for groups, seeds, kind in candidates:
        scored = set(seeds or [])
        shown = [g for g in (replace(g, runs=[r for r in g.runs if r.seed in scored]) for g in groups) if g.completed]
        if shown:
            return shown, "\n" + caption("shown_note", kind, target, sorted(scored))
    return list(report.groups), ""


def shown_labels(groups: list[ConfigGroup]) -> dict[str, str]:
    """Legend labels of the configurations a figure shows: the keys that vary among them (not across the whole
    sweep), without the run-length keys :func:`~bnexp.report.groups.following_keys` leaves out; e.g. the
    inference study's "trainer.batch_size=2 lr=0.15 bn.momentum=0.01" instead of five keys; an option left unset
    (null, e.g. no ghost batches) is not named. Maps group key -> label (the configuration's own label where no
    key varies)."""
    keep = shown_keys(groups)
    return {g.key: kv_label(g.config, [k for k in keep if g.config.get(k) is not None]) or legend_label(g)
            for g in groups}


def _shown(report: Report) -> tuple[list[ConfigGroup], str, dict[str, Style]]:
    """The configurations of :func:`chosen_groups`, its note and their styles (:func:`~.figstyle.styles` over
    the whole sweep; in a held-out sweep labelled by :func:`shown_labels`)."""
    st = styles(report.groups)
    shown, note = chosen_groups(report)
    st = relabelled(shown, st) if note else st
    return shown, note, {g.key: st[g.key] for g in shown}


LOG_STEPS = 100  # a step axis is logarithmic when the last step is at least this many times the first evaluated one


def log_steps(steps: list[list[int]], decades: float = LOG_STEPS) -> int | None:
    """The linear threshold of a symmetric-log step axis when the configurations' evaluated ``steps`` (one list
    per configuration) span at least ``decades`` (a ratio, 100: two decades) from the first evaluated step after 0
    to the last, else None (a linear axis); the threshold is the power of ten at or below that first step, so the
    ticks are 0 and whole decades. Sec. 4.1's Fig. 1(a) on a linear axis squeezes BN's lead into its first few percent
    of the steps; a study whose runs end at 938 and 120,000 steps puts the short ones in one pixel."""
    positive = [s for run in steps for s in run if s > 0]
    if not positive or max(positive) < decades * min(positive):
        return None
    return 10 ** math.floor(math.log10(min(positive)) + 1e-9)


def step_axis(ax, linthresh: int | None) -> None:
    """Make ``ax``'s x axis the step axis: symmetric-log (linear from 0 to ``linthresh``, logarithmic beyond, step
    0 still shown) with plain step numbers as ticks when ``linthresh`` is set (:func:`log_steps`), else linear."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xlabel(step_label(linthresh is not None))
    if linthresh is None:
        ax.set_xscale("linear")
    else:
        ax.set_xscale("symlog", linthresh=linthresh, linscale=0.5)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))


def accuracy_data(groups: list[ConfigGroup]) -> list[tuple]:
    """Per configuration with metrics: (group, steps, mean %, max over seeds %, band low %, band high %,
    [(steps, accuracy fraction) of each seed]); the band is :func:`bnexp.analysis.seed_bands.seed_band`'s."""
    data = []
    for g in groups:
        band = seed_band(g.completed, "test_accuracy")
        if len(band):
            seeds = [per_seed(run, "test_accuracy") for run in sorted(g.completed, key=seed_order)]
            top = pd.concat(seeds, axis=1).max(axis=1).reindex(band["step"]).to_numpy()
            steps, mean, low, high = band_arrays(band)
            data.append((g, steps.astype(int).tolist(), 100 * mean, 100 * top, 100 * low, 100 * high,
                         [(s.index.tolist(), s.to_numpy()) for s in seeds if len(s)]))
    return data


def _draw_curves(panels, data: list[tuple], st: dict[str, Style], label_ax) -> None:
    """Each configuration of ``data`` on every axes of ``panels``: its seeds light and thin, its band shaded, its
    mean bold (labelled on ``label_ax`` only)."""
    for g, steps, mean, _, low, high, seeds in data:
        s = st[g.key]
        for a in panels:
            for seed_steps, acc in seeds:
                a.plot(seed_steps, 100 * np.asarray(acc), color=s.color, linestyle="-", linewidth=0.6, alpha=0.3)
            a.fill_between(steps, low, high, color=s.color, alpha=0.25, linewidth=0)
            a.plot(steps, mean, color=s.color, linestyle=s.linestyle, linewidth=2.0,
                   label=caption("curve_entry", s.label, len(g.completed)) if a is label_ax else None)


def _zoom_x(data: list[tuple], zr: tuple[float, float]) -> tuple[float, float]:
    """(first, last) step of the zoomed panel: from the last evaluation before a curve enters the range ``zr``."""
    first = [f for _, steps, mean, *_ in data
             if (f := next((steps[max(0, k - 1)] for k, m in enumerate(mean) if m >= zr[0]), None)) is not None]
    last = max(d[1][-1] for d in data)
    return (min(first) if first and min(first) < last else min(d[1][0] for d in data)), last


def _set_zoom_x(zax, x0: float, last: float, linthresh: int | None) -> None:
    """The zoomed panel's step axis from ``x0`` to ``last`` (a small margin each side): logarithmic as the whole
    range's (``linthresh``, :func:`log_steps`) only where it spans two decades itself (MNIST's zoom, 3,000 to
    30,000 steps, stays linear)."""
    if linthresh is not None and last < LOG_STEPS * max(x0, 1):
        linthresh = None
        step_axis(zax, None)
    if x0 >= last:
        return
    if linthresh is None:
        zax.set_xlim(x0 - 0.02 * (last - x0), last + 0.02 * (last - x0))
    else:
        zax.set_xlim(x0 * 0.9, last * 1.1)


def accuracy_figure(report: Report):
    """Fig. 1(a) (Sec. 4.1) / Fig. 2 form (Sec. 4.2): test accuracy (%) vs training step. Per configuration a bold
    line, the mean over its completed seeds, in a shaded band, the 95% Student-t interval of that mean
    (:func:`bnexp.analysis.seed_bands.seed_band`: at each step over the seeds evaluated there, so a diverged seed
    stops contributing where its metrics end; no band where fewer than 2 seeds are left), and each seed as a light
    thin line of the same colour behind them: the numbers of the sweep's aggregate TensorBoard runs
    (:mod:`bnexp.report.aggregate`), so the figure and TensorBoard's "over seeds" charts agree. A second panel zooms
    on the top of the range (:func:`zoom_range`) only when at least two configurations end inside it (else it would
    show one curve); one legend below. The step axis is logarithmic where the steps span two decades
    (:func:`log_steps`). More than :data:`MAX_LEGEND` configurations (a study's stage 2) go to one column of panels
    per normalizer family instead (:func:`family_accuracy_figure`)."""
    plt = pyplot()
    shown, note, st = _shown(report)
    data = accuracy_data(shown)
    if len(data) > MAX_LEGEND:
        return family_accuracy_figure(report, data, note)
    linthresh = log_steps([d[1] for d in data])
    zr = zoom_range([(list(mean), list(hi)) for _, _, mean, hi, *_ in data])
    zoom = zr is not None and sum(1 for d in data if d[2][-1] >= zr[0]) >= 2
    fig, axes = plt.subplots(1, 2 if zoom else 1, figsize=(11 if zoom else 7.5, 5.2), squeeze=False)
    ax, panels = axes[0][0], list(axes[0])
    _draw_curves(panels, data, st, ax)
    ax.set_title(caption("whole_title") if zoom else "", fontsize=9)
    if zr is None:
        ax.text(0.5, 0.5, caption("no_metrics"), ha="center", va="center",
                transform=ax.transAxes, fontsize=8)
    for a in panels:
        step_axis(a, linthresh)
    if zr is not None and zoom:
        zax = axes[0][1]
        zax.set_ylim(*zr)
        _set_zoom_x(zax, *_zoom_x(data, zr), linthresh)
        zax.set_title(caption("zoom_title", *zr), fontsize=9)
        from matplotlib.patches import Rectangle

        x_lo, x_hi = zax.get_xlim()
        ax.add_patch(Rectangle((x_lo, zr[0]), x_hi - x_lo, zr[1] - zr[0], fill=False, edgecolor="gray",
                               linewidth=0.8, linestyle="-", label=None))
    if data:  # a band of few seeds may reach past 0% or 100%: the axis stops there, as accuracy does
        ax.set_ylim(max(ax.get_ylim()[0], -1.0), min(ax.get_ylim()[1], 101.0))
    for a in panels:
        a.set_ylabel(caption("accuracy_axis"))
        a.grid(alpha=0.3)
    fig.suptitle(caption("accuracy_title", refs(report.data)["accuracy"]) + note, fontsize=10)
    legend_below(fig, *ax.get_legend_handles_labels(),
                 title=legend_title(caption("accuracy_note"), style_note(report.groups)))
    return fig


FAMILY_ORDER = ("no BN", "BN", "noisy BN", "LayerNorm", "GroupNorm", None)


def ramp_order(groups: list[ConfigGroup]) -> tuple[list[ConfigGroup], list[str]]:
    """(``groups`` in ramp order, the keys that order them): the keys that vary among them (run-length keys that
    follow another key left out, :func:`~bnexp.report.groups.following_keys`), the one with the most
    values first (the batch-size study's m), the rate ``lr`` last; values by
    :func:`bnexp.report.groups.sort_value` (unset last)."""
    keys = shown_keys(groups)
    count = {k: len({format_value(g.config.get(k)) for g in groups}) for k in keys}
    keys = sorted(keys, key=lambda k: (k == "lr", -count[k]))
    return sorted(groups, key=lambda g: [sort_value(g.config.get(k)) for k in keys]), keys


def family_accuracy_figure(report: Report, data: list[tuple], note: str):
    """Fig. 1(a) for a sweep of more configurations than one legend names (:data:`MAX_LEGEND`; the batch-size
    study's 23): one column of panels per normalizer family (no BN, BN, noisy BN, LayerNorm, GroupNorm; ghost BN
    with BN), the whole range on top and, where :func:`zoom_range` holds two configurations, the top of the range
    under it; every panel on the same axes, so a family's curves compare with the next column's at a glance.
    Within a family one sequential ramp of its colour, light to dark in the order of :func:`ramp_order` (the
    batch-size study: m from 2 to 256; ghost BN dotted), labelled by the keys that vary within it; at most
    :data:`MAX_LEGEND` per family (:func:`at_most`; the panel title says how many of how many). Curves as
    :func:`accuracy_figure`'s."""
    from matplotlib.patches import Rectangle

    plt = pyplot()
    by_family: dict = {}
    for d in data:
        by_family.setdefault(colour_family(d[0]), []).append(d)
    families = [f for f in FAMILY_ORDER if f in by_family] + [f for f in by_family if f not in FAMILY_ORDER]
    columns = []  # (family, its data in ramp order, the keys of the ramp, how many it has)
    for fam in families:
        mine = {d[0].key: d for d in by_family[fam]}
        ordered, keys = ramp_order([d[0] for d in by_family[fam]])
        kept = at_most(ordered)
        columns.append((fam, [mine[g.key] for g in kept], keys, len(ordered)))
    linthresh = log_steps([d[1] for d in data])
    zr = zoom_range([(list(mean), list(hi)) for _, _, mean, hi, *_ in data])
    zoom = zr is not None and sum(1 for d in data if d[2][-1] >= zr[0]) >= 2
    ncol, nrow = len(columns), 2 if zoom else 1
    labels = {}
    for fam, rows, keys, total in columns:
        if len(rows) < total:  # name only the keys that vary among the configurations drawn
            keys = [k for k in keys if k in shown_keys([g for g, *_ in rows])]
        for g, *_ in rows:
            labels[g.key] = kv_label(g.config, [k for k in keys if g.config.get(k) is not None]) or legend_label(g)
    chars = max(len(x) for x in labels.values()) + 6  # " (n=5)"
    col_in = max(3.4, 0.065 * chars + 0.9, MIN_WIDTH_IN / ncol)  # one family alone: as wide as its title needs
    fig, axes = plt.subplots(nrow, ncol, figsize=(col_in * ncol, 2.7 * nrow + 0.9), squeeze=False, sharex="row",
                             sharey="row")
    for c, (fam, rows, keys, total) in enumerate(columns):
        n = len(rows)
        st = {g.key: Style(family_color(fam, 0.95 if n == 1 else 0.4 + 0.55 * i / (n - 1)),
                           ":" if normalizer(g.config) == "ghost" else LINESTYLE[bn_variant(g)], None, labels[g.key])
              for i, (g, *_) in enumerate(rows)}
        panels = [axes[r][c] for r in range(nrow)]
        _draw_curves(panels, rows, st, panels[0])
        panels[0].set_title(caption("family_panel", fam, n, total), fontsize=9)
        if zoom:
            panels[1].set_title(caption("family_panel", fam, n, total, zoom=True), fontsize=9)
    for a in axes.flat:
        step_axis(a, linthresh)
        a.set_ylabel(caption("accuracy_axis"))
        a.grid(alpha=0.3)
        a.tick_params(labelleft=True, labelbottom=True)
    axes[0][0].set_ylim(max(axes[0][0].get_ylim()[0], -1.0), min(axes[0][0].get_ylim()[1], 101.0))
    if zoom:
        axes[1][0].set_ylim(*zr)
        _set_zoom_x(axes[1][0], *_zoom_x(data, zr), linthresh)
        for a in axes[0]:
            x_lo, x_hi = axes[1][0].get_xlim()
            a.add_patch(Rectangle((x_lo, zr[0]), x_hi - x_lo, zr[1] - zr[0], fill=False, edgecolor="gray",
                                  linewidth=0.8, label=None))
    width = fig.get_size_inches()[0]
    title = wrap_title(caption("accuracy_title", refs(report.data)["accuracy"], columns=True) + note, int(width * 12))
    title += "\n" + wrap_title(caption("family_note"), int(width * 12))
    fig.suptitle(title, fontsize=10)
    legends_below_columns(fig, [list(axes[:, c]) for c in range(ncol)])
    return fig


def legends_below_columns(fig, columns: list[list]) -> None:
    """One legend per column of panels (``columns``: each column's axes, top to bottom; the entries of its top
    axes), one entry a line, under the column, outside every axes; the figure grows by the tallest legend.
    ``fig.tight_layout`` then fits the panels between the legends and the suptitle (it leaves the suptitle its
    room)."""
    entries = [columns_ax[0].get_legend_handles_labels() for columns_ax in columns]
    rows = max((len(labels) for _, labels in entries), default=0)
    width_in, height_in = fig.get_size_inches()
    legend_in = 0.15 + 0.19 * rows
    fig.set_size_inches(width_in, height_in + legend_in)
    bottom = legend_in / (height_in + legend_in)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    for ax_column, (handles, labels) in zip(columns, entries):
        if handles:
            box = ax_column[-1].get_position()
            fig.legend(handles, labels, loc="upper center", bbox_to_anchor=((box.x0 + box.x1) / 2, bottom),
                       ncol=1, fontsize=8, frameon=False)


def lowest_seed_shift(sweep: Sweep, group: ConfigGroup) -> Run | None:
    """The completed run with the lowest seed whose shift.jsonl records hold the typical unit."""
    runs = [r for r in group.completed if any(c.startswith("unit.") for c in sweep.rows("shift", r).columns)]
    return min(runs, key=seed_order) if runs else None


def figure_rows(groups: list[ConfigGroup],
                ignore: tuple[str, ...] = ()) -> tuple[list[str], list[dict[str, ConfigGroup]]]:
    """(column names, rows as {column: configuration}) of the percentile figure: one row per
    setting (:func:`pair_key` without the keys ``ignore``, e.g. ("lr",) where each ran at its own rate), one
    column per normalizer family present (no BN, BN, noisy BN, LayerNorm, GroupNorm, then unknown ones), each
    split by place ("BN", "BN after g") where the configurations place their normalizer both before and after
    the nonlinearity (``bn.position``, the placement study). Two configurations of one setting and column (two
    BN presets) go to separate rows; plain BN (not ghost batches) takes the row with no BN."""
    places = {option_text(g.config.get("bn.position")) for g in groups if normalizer(g.config) != "none"}

    def column(g: ConfigGroup) -> str:
        name = colour_family(g) or "configuration"
        after = len(places) > 1 and name != "no BN" and option_text(g.config.get("bn.position")) == "after"
        return name + (" after g" if after else "")

    present = {column(g) for g in groups}
    columns = [c + p for c in ("no BN", "BN", "noisy BN", "LayerNorm", "GroupNorm", "configuration")
               for p in ("", " after g") if c + p in present]
    rows: list[dict[str, ConfigGroup]] = []
    row_of: dict[str, list[int]] = {}
    for g in sorted(groups, key=lambda g: normalizer(g.config) == "ghost"):
        col, own = column(g), row_of.setdefault(pair_key(g, ignore), [])
        idx = next((i for i in own if col not in rows[i]), None)
        if idx is None:
            rows.append({})
            idx = len(rows) - 1
            own.append(idx)
        rows[idx][col] = g
    return columns, rows


def shown_rows(columns: list[str], rows: list[dict[str, ConfigGroup]]) -> list[dict[str, ConfigGroup]]:
    """The rows of the percentile figure: the settings with every BN variant of the sweep (no empty panel),
    else those with the most variants (a row of BN alone is no comparison); at most :data:`MAX_PERCENTILE_ROWS`,
    spread over the settings in order (first, middle, last)."""
    most = max((len(r) for r in rows), default=0)
    full = [r for r in rows if len(r) == most]
    if len(full) <= MAX_PERCENTILE_ROWS:
        return full
    picks = sorted({round(i * (len(full) - 1) / (MAX_PERCENTILE_ROWS - 1)) for i in range(MAX_PERCENTILE_ROWS)})
    return [full[i] for i in picks]


def _percentile_panel(ax, sweep: Sweep, group: ConfigGroup, label: str, color, relative: bool = False) -> bool:
    """One panel of Fig. 1(b, c): the typical unit's median and 15-85 band over steps, of the configuration's
    lowest seed, in raw pre-activation units or, with ``relative``, as (percentile - initial median) / initial
    15-85 spread on a symlog axis (the band starts at -0.5..0.5 whatever the unit's scale: a net whose initial
    spread is tiny moves by many spreads); False (the panel says so) without shift.jsonl records or, relative,
    with an initial spread of 0."""
    from matplotlib.ticker import MaxNLocator

    run = lowest_seed_shift(sweep, group)
    rows = sweep.rows("shift", run) if run else None
    keys = band_keys(c[5:] for c in rows.columns if c.startswith("unit.")) if run else None
    if keys is None:
        ax.set_title(label + "\n" + caption("unit_panel", "no_records"), fontsize=8)
        return False
    (lo, mid, hi), steps = keys, rows["step"].tolist()
    band = {k: np.asarray(numeric(rows[f"unit.{k}"]), dtype=float) for k in (lo, mid, hi)}
    index, layer = (rows[f"unit.{k}"].iloc[0] if f"unit.{k}" in rows else None for k in ("index", "layer"))
    index = int(index) if isinstance(index, (int, float)) and np.isfinite(index) else index
    if relative:
        spread = band[hi][0] - band[lo][0]
        if not np.isfinite(spread) or spread <= 0:
            ax.set_title(label + "\n" + caption("unit_panel", "no_spread"), fontsize=8)
            return False
        band = {k: (v - band[mid][0]) / spread for k, v in band.items()}
    ax.fill_between(steps, band[lo], band[hi], alpha=0.3, color=color, linewidth=0,
                    label=caption("percentile_entry", "band", low=lo[1:], high=hi[1:]))
    ax.plot(steps, band[mid], color=color, label=caption("percentile_entry", "median", mid=mid[1:]),
            marker="o" if len(rows) < 3 else None)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
    if relative:  # linear within one initial spread, logarithmic beyond: a band of 0.5 and one of 10^4 both show
        from matplotlib.ticker import FuncFormatter

        ax.set_yscale("symlog", linthresh=1.0)
        ax.yaxis.set_major_formatter(FuncFormatter(  # -10,000 and 0.55, not -10^4 and 5.5x10^-1
            lambda v, _: f"{v:,.0f}" if abs(v) >= 1 or v == 0 else f"{v:.2g}"))
    ax.set_title(label + "\n" + caption("unit_panel", "unit", run.seed, index, layer), fontsize=8)
    return True


VIEWS = (False, True)  # percentiles.png's two rows per setting: raw, relative (:func:`_percentile_panel`)


def percentile_ylabel(relative: bool) -> str:
    """The y label of a row of the percentile figure: the view (raw or ``relative``) over its unit, two lines."""
    return caption("percentile_axis", relative) + "\n" + caption("percentile_unit", relative)


def percentiles_figure(report: Report):
    """Fig. 1(b, c) (Sec. 4.1): percentiles of the input to a typical last-hidden-layer unit over
    training, one column per BN variant (:func:`figure_rows`) and per setting two rows: the raw view
    (pre-activation units) and the relative view ((percentile - initial median) / initial 15-85 spread,
    :func:`_percentile_panel`), each labelled on its y axis, y axis shared within a row; at most
    :data:`MAX_PERCENTILE_ROWS` settings, those with every variant (:func:`shown_rows`; the title says how many
    of how many), so the figure fits a screen. In a held-out sweep, the configurations of :func:`chosen_groups`
    on their evaluation seeds, paired across rates; in another sweep too where no setting has every variant at
    one rate (each normalizer on a grid of its own)."""
    plt = pyplot()
    groups, note, st = _shown(report)
    columns, rows = figure_rows(groups, ("lr",) if note else ())
    if not note and not any(len(r) == len(columns) for r in rows):  # each variant at its own rates: pair across
        across = figure_rows(groups, ("lr",))
        if any(len(r) == len(across[0]) for r in across[1]):
            columns, rows = across
    total, rows = len(rows), shown_rows(columns, rows)
    if not rows:
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.text(0.5, 0.5, caption("no_configurations"), ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    ncol = len(columns)
    width_in = max((4.6 if ncol < 4 else 3.6) * ncol, 6.5)  # four families (the normalizer study) still fit
    fig, axes = plt.subplots(len(VIEWS) * len(rows), ncol, figsize=(width_in, 2.05 * len(VIEWS) * len(rows) + 1.3),
                             squeeze=False)
    handles: list = []
    labels: list[str] = []
    for k, (row, relative) in enumerate((r, v) for r in rows for v in VIEWS):
        ax_row = axes[k]
        missing = caption("missing_runs", [c for c in columns if c not in row])
        for col, ax in zip(columns, ax_row):
            g = row.get(col)
            if g is None:
                ax.set_visible(False)
                continue
            label = st[g.key].label + missing
            if not _percentile_panel(ax, report.sweep, g, wrap_title(label, int(width_in / ncol * 13)),
                                     st[g.key].color, relative):
                ax.set_axis_off()
                continue
            if not handles:
                handles, labels = ax.get_legend_handles_labels()
            ax.set_xlabel(step_label(), fontsize=8)
            ax.set_ylabel(percentile_ylabel(relative), fontsize=8)
            ax.grid(alpha=0.3)
        drawn = [a for a in ax_row if a.get_visible() and a.axison]
        if len(drawn) > 1:  # one y scale per row: no BN and BN of a setting compare directly
            lims = [a.get_ylim() for a in drawn]
            for a in drawn:
                a.set_ylim(min(lo for lo, _ in lims), max(hi for _, hi in lims))
    width = fig.get_size_inches()[0]
    title = wrap_title(caption("percentiles_title", refs(report.data)["percentiles"], len(rows), total),
                       int(width * 12))
    title += "\n" + wrap_title(note.strip(), int(width * 12)) if note else ""  # ~12 characters per inch at size 10
    fig.suptitle(title, fontsize=10)
    legend_below(fig, handles, labels)
    return fig


# the keys a CIFAR-10 ladder's rungs may differ in besides run length: its rungs switch to bf16 from one on
# (docs/cifar/PLAN.md, "Precision"), and the rung, not the precision, is what a legend tells apart
PRECISION_KEYS = ("trainer.precision", "scale.precision")


def _spread(items: list, k: int) -> list:
    """``k`` of ``items`` spread evenly over the list in its order (first and last included); all when they fit."""
    if len(items) <= k:
        return list(items)
    if k <= 1:
        return items[:k]
    return [items[i] for i in sorted({round(i * (len(items) - 1) / (k - 1)) for i in range(k)})]


def _spread_over_families(groups: list[ConfigGroup], k: int) -> list[ConfigGroup]:
    """``k`` of ``groups``: the slots dealt to their colour families (:func:`~bnexp.report.figstyle.colour_family`:
    no BN, BN, LayerNorm, ...) in turn, one at a time, while a family has configurations left, so every family is
    drawn when ``k`` allows; within a family :func:`_spread`. All when they fit."""
    families: dict = {}
    for g in groups:
        families.setdefault(colour_family(g), []).append(g)
    slots, left = dict.fromkeys(families, 0), min(k, len(groups))
    while left:
        for fam, members in families.items():
            if left and slots[fam] < len(members):
                slots[fam], left = slots[fam] + 1, left - 1
    return [g for fam, members in families.items() for g in _spread(members, slots[fam])]


def at_most(groups: list[ConfigGroup], limit: int = MAX_LEGEND) -> list[ConfigGroup]:
    """At most ``limit`` of ``groups`` (all when they fit), for a figure whose legend names each: first each
    configuration's longest run only among those that differ only in run length or precision
    (:data:`SCHEDULE_KEYS`, :data:`PRECISION_KEYS`: the CIFAR-10 ladder's rungs, shown by their top rung); then,
    if still more, the ladders (configurations with several rungs) before single runs: every ladder when they
    fit, with the slots left spread evenly over the single runs (a tuning grid's other rates), every normalizer
    family in turn (:func:`_spread_over_families`); else ``limit`` ladders spread evenly. The result keeps the
    order of ``groups``."""
    if len(groups) <= limit:
        return list(groups)
    longest: dict[str, ConfigGroup] = {}
    rungs: dict[str, int] = {}
    for g in groups:
        key = config_key(g.config, SCHEDULE_KEYS + PRECISION_KEYS)
        rungs[key] = rungs.get(key, 0) + 1
        budget = g.config.get("trainer.max_steps") or 0
        if key not in longest or budget > (longest[key].config.get("trainer.max_steps") or 0):
            longest[key] = g
    if len(longest) <= limit:
        return [g for g in groups if g in longest.values()]
    ladders = [g for k, g in longest.items() if rungs[k] > 1]
    singles = [g for k, g in longest.items() if rungs[k] == 1]
    chosen = (ladders + _spread_over_families(singles, limit - len(ladders)) if len(ladders) <= limit
              else _spread(ladders, limit))
    return [g for g in groups if g in chosen]


def subset_styles(shown: list[ConfigGroup], every: list[ConfigGroup], st: dict[str, Style]) -> dict[str, Style]:
    """``st`` for the configurations a figure draws; where it draws fewer than ``every`` (:func:`at_most`), their
    legend labels name only the keys that vary among those drawn (:func:`shown_labels`)."""
    return st if len(shown) == len(every) else relabelled(shown, st)


def relabelled(shown: list[ConfigGroup], st: dict[str, Style]) -> dict[str, Style]:
    """``st`` with the configurations ``shown`` labelled by :func:`shown_labels` (the keys that vary among them)."""
    named = shown_labels(shown)
    return {**st, **{g.key: replace(st[g.key], label=named.get(g.key, st[g.key].label)) for g in shown}}


def stability_figure(report: Report):
    """Per-layer stability bars (Fig. 1(b, c) in numbers): |median_end - median_first| of each
    hidden layer's input to the nonlinearity and its 15-85 spread ratio end / first, mean over
    finished seeds; one bar per configuration (in a held-out sweep, those of :func:`chosen_groups`, over their
    evaluation seeds), at most :data:`MAX_LEGEND` of them (:func:`at_most`; the title says how many of how
    many)."""
    shown, note, st = _shown(report)
    confs = [(g, stab) for g in shown if (stab := config_stability(g, report.sweep))]
    return _stability_bars(confs, st, report.data, note, report.groups)


def stability_figure_of(data: dict):
    """The stability figure (:func:`stability_figure`) of a report.json ``data`` alone, for an archived sweep whose
    run folders are gone: one configuration per ``configurations`` entry, with the per-layer ``stability`` it stores
    (the numbers :func:`bnexp.report.stats.config_stability` gave over its finished seeds, those the figure draws)
    and its stored label.

    Raises:
        ValueError: ``data`` is a held-out sweep's (its figure draws the evaluation seeds only, which report.json
            does not store per configuration).
    """
    if data.get("tuning_seeds") or data.get("evaluation_seeds"):
        raise ValueError("a held-out sweep's stability figure needs its run folders: run bnexp report on the sweep")
    groups = [ConfigGroup(key=config_key(c["config"]), config=c["config"], label=c["label"],
                          variant_label=c.get("variant_label") or "") for c in data["configurations"]]
    confs = [(g, c["stability"]) for g, c in zip(groups, data["configurations"]) if c.get("stability")]
    return _stability_bars(confs, styles(groups), data, "", groups)


def _stability_bars(confs: list[tuple[ConfigGroup, dict]], st: dict[str, Style], data: dict, note: str,
                    groups: list[ConfigGroup]):
    """The stability figure of ``confs`` (configuration, {layer: {"median_shift", "spread_ratio", ...}}) in the
    styles ``st``: at most :data:`MAX_LEGEND` of them (:func:`at_most`), the title citing the paper part of report.json
    ``data`` with ``note`` under it, the legend's style note naming the variants of ``groups``."""
    plt = pyplot()
    every, confs = [g for g, _ in confs], [c for c in confs if c[0] in at_most([g for g, _ in confs])]
    total, st = len(every), subset_styles([g for g, _ in confs], every, st)
    layers = ordered_keys(stab for _, stab in confs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.4 + 0.22 * len(confs)), squeeze=False)
    for ax, key in zip(axes[0], ("median_shift", "spread_ratio")):
        ax.set_title(caption("stability_panel", key), fontsize=9)
        ax.set_ylabel(caption("stability_axis", key) + "\n" + caption("stability_unit", key), fontsize=8)
        ax.set_xlabel(caption("layer_axis"), fontsize=8)
        ax.grid(alpha=0.3, axis="y")
        if not confs:
            ax.text(0.5, 0.5, caption("no_records"), ha="center", va="center", transform=ax.transAxes)
            continue
        width = 0.8 / len(confs)
        for i, (g, stab) in enumerate(confs):
            vals = [stab.get(layer, {}).get(key) for layer in layers]
            xs, sty = [j - 0.4 + width * (i + 0.5) for j in range(len(layers))], st[g.key]
            ax.bar(xs, [np.nan if v is None else v for v in vals], width, color=sty.color, hatch=sty.hatch,
                   edgecolor="black", linewidth=0.4, label=sty.label)
        many = len(layers) > 6 and all(re.fullmatch(r"layer\d+", name) for name in layers)  # "1".."10": fit the axis
        ax.set_xticks(range(len(layers)), [name[len("layer"):] for name in layers] if many else layers)
        if key == "spread_ratio":
            ax.axhline(1.0, color="gray", linewidth=0.8, linestyle=":")
    width = fig.get_size_inches()[0]
    title = wrap_title(caption("stability_title", refs(data)["stability"], len(confs), total), int(width * 12))
    title += "\n" + wrap_title(note.strip(), int(width * 12)) if note else ""
    fig.suptitle(title, fontsize=10)
    legend_below(fig, *axes[0][0].get_legend_handles_labels(),
                 title=legend_title(caption("seed_mean_note"), style_note(groups, bars=True)))
    return fig


FIGURES = {"accuracy_vs_steps.png": (accuracy_figure, 110), "percentiles.png": (percentiles_figure, 100),
           "stability.png": (stability_figure, 100)}  # file name -> (figure of a report, dpi)
