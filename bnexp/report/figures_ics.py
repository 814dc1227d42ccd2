"""The figures of the section "Does BN reduce internal covariate shift?": one line per configuration
(mean over finished seeds) of each view's measurement vs step; :data:`ICS_PLOTS` names the file
of each (written at 100 dpi)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pandas as pd

from bnexp.report.build import Report
from bnexp.report.figstyle import (caption, legend_below, legend_title, pyplot, step_label, style_note, styles,
                                   wrap_title)
from bnexp.report.figures import at_most, subset_styles
from bnexp.report.ics_stats import gradient_long, layer_long, records
from bnexp.analysis.runs import Run, Sweep, numeric

def axis_label(key: str) -> str:
    """The y-axis label of the measure ``key``: name and unit in parentheses (the macro ``ics_axis`` of
    templates/figure_titles.md.j2; a ``w1_*`` variant of W1 is in pre-activation units). Raises KeyError for a key
    without a known unit."""
    label = caption("ics_axis", key)
    if not label:
        raise KeyError(f"no axis label known for the ICS figure panel {key!r}: add it to the macro ics_axis of "
                       "bnexp/report/templates/figure_titles.md.j2")
    return label


def layer_mean_series(sweep: Sweep, run: Run, view: str, key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of ``key`` in one run, for a figure: ``view`` "shift" (mean over layers), "grad"
    (mean over layers 2..K) or "land" (landscape probes)."""
    if view == "land":
        rows = records(sweep.rows("ics", run), "landscape")
        if rows.empty:  # a run without landscape probes (its ics.jsonl missing or unreadable)
            return [], []
        s = pd.to_numeric(rows.get(key, pd.Series(dtype=float)), errors="coerce").groupby(rows["step"]).mean()
    else:
        long = (layer_long(sweep.rows("shift", run), "shift_metrics") if view == "shift"
                else gradient_long(sweep.rows("ics", run)))
        s = long[long["key"] == key].groupby("step")["value"].mean()
    return [int(i) for i in s.dropna().index], s.dropna().tolist()


def ics_figure(report: Report, view: str, panels: list[tuple[str, str, Any]], title: str, log: bool = False):
    """One ICS figure of the configurations that measured ``view``: a panel per (key, y label, series of a run:
    ``fn(sweep, run) -> (steps, values)``) that has data (one "not measured" panel when none has), one line per
    configuration (mean over its finished seeds at every step), y labels of :func:`axis_label`, log y-scale with
    ``log`` where all values are positive, one legend below the panels; at most :data:`~.figures.MAX_LEGEND`
    configurations (:func:`~.figures.at_most`; the title says how many of how many). The words are macros of
    templates/figure_titles.md.j2."""
    plt = pyplot()
    confs = [(g, g.finished) for g, s in zip(report.groups, report.data["configurations"])
             if s.get("ics") and any(k.startswith(view + ".") for k in s["ics"]["measures"])]
    every = [g for g, _ in confs]
    kept = at_most(every)
    confs = [(g, runs) for g, runs in confs if g in kept]
    st = subset_styles(kept, every, styles(report.groups))
    title += caption("shown_of", len(kept), len(every))
    drawn_panels = []
    for key, ylabel, fn in panels:
        lines = []
        for g, runs in confs:
            series = [s for s in (fn(report.sweep, r) for r in runs) if s[0]]
            if not series:
                continue
            steps = [int(x) for s, _ in series for x in s]
            mean = numeric([v for _, vals in series for v in vals]).groupby(steps).mean().dropna()
            if len(mean):
                lines.append((g, mean.index.tolist(), mean.tolist(), len(series)))
        if lines:
            drawn_panels.append((key, ylabel, lines))
    width = max(8.0, 4.8 * len(drawn_panels) + 0.6)
    fig, axes = plt.subplots(1, max(1, len(drawn_panels)), figsize=(width, 4.6), squeeze=False)
    if not drawn_panels:
        axes[0][0].text(0.5, 0.5, caption("not_measured"), ha="center", va="center", transform=axes[0][0].transAxes)
        axes[0][0].set_axis_off()
    for ax, (key, ylabel, lines) in zip(axes[0], drawn_panels):
        for g, steps, vals, n in lines:
            ax.plot(steps, vals, color=st[g.key].color, linestyle=st[g.key].linestyle, linewidth=1.6,
                    marker="o" if len(steps) < 3 else None, label=caption("curve_entry", st[g.key].label, n))
        every = [v for _, _, vals, _ in lines for v in vals]
        if log and every and min(every) > 0:
            ax.set_yscale("log")
        ax.set_title(wrap_title(ylabel, int(width / max(1, len(drawn_panels)) * 10)), fontsize=9)
        ax.set_ylabel(axis_label(key), fontsize=8)
        ax.set_xlabel(step_label(), fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(wrap_title(title, int(width * 12)), fontsize=10)
    legend_below(fig, *axes[0][0].get_legend_handles_labels(),
                 title=legend_title(caption("seed_mean_note"), style_note([g for g, _ in confs])))
    return fig


def _view(view: str, keys: list[str], log: bool = False):
    """The figure of ``view`` with a panel per measure of ``keys``, as a function of the report; its title and the
    panels' titles are the macros ``ics_title`` and ``ics_panel`` of templates/figure_titles.md.j2."""
    def figure(report: Report):
        panels = [(k, caption("ics_panel", k), partial(layer_mean_series, view=view, key=k)) for k in keys]
        return ics_figure(report, view=view, panels=panels, title=caption("ics_title", view), log=log)

    return figure


ICS_PLOTS = {  # file name -> figure of a report
    # the BN paper's view: how far each layer's input distribution moved from its first record (step 0),
    # averaged over layers: KS distance and W1 / initial spread (scale-free), raw W1 (pre-activation units)
    "ics_distribution.png": _view("shift", ["ks_first", "w1_rel_first", "w1_first"]),
    # gradient-based ICS, layers 2..K averaged: Santurkar et al.'s Def. 2.1 as defined (the raw ||G - G'||_2, and
    # cos(G, G') of their Fig. 3), then the normalized variant of the pre-registered row (||G - G'|| / ||G|| per
    # unit of the earlier layers' relative movement), which is not Def. 2.1 (docs/ics/PLAN.md, amendment)
    "ics_gradient.png": _view("grad", ["l2", "cos", "l2_rel_per_move"]),
    # loss variation and effective beta-smoothness along the gradient (Santurkar et al. 2018, Sec. 3.1, Fig. 4)
    # along filter-normalized directions (Li et al. 2018), and the raw beta-smoothness; log y where all positive
    "ics_landscape.png": _view("land", ["fn_loss_variation", "fn_beta_smoothness", "beta_smoothness"], log=True),
}
