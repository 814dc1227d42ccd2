"""The figures drawn from report.json alone, so that each can be redrawn from the JSON: one per study
(docs/studies/, :func:`bnexp.report.study_claims.study_section`; :data:`FIGURES`) and the Sec. 4.2 frontier
(:func:`frontier_figure`). Styles follow :mod:`bnexp.report.figstyle`; seed means are lines or bars with each
seed's value as a point, log axes where a quantity spans orders of magnitude, and a target never reached is an
open marker at the budget. Their words are the macros of templates/figure_titles.md.j2 (:func:`~.figstyle.caption`).
"""

from __future__ import annotations

import math
from itertools import product

from bnexp.report.figstyle import FAMILY, caption, family_color, figure_png, legend_below, pyplot, wrap_title
from bnexp.analysis.frontier import BASELINE, ORDER, PASS_FACTOR
from bnexp.analysis.rules import NORMALIZERS as NAMES


def _color(norm: str):
    """The colour of a normalizer in its :data:`~.figstyle.FAMILY`, ghost BN a light orange; black if unknown."""
    if norm == "ghost":
        return family_color("BN", 0.45)
    return family_color(NAMES[norm]) if NAMES.get(norm) in FAMILY else "black"


def _mean(st: dict | None):
    return (st or {}).get("mean")


def _points(ax, x, row: dict, key: str, color, marker="o", scale: float = 1):
    """Each seed's ``key`` of the table ``row`` (times ``scale``) as a small point at ``x``."""
    vs = [scale * p[key] for p in row["per_seed"].values() if p[key] is not None]
    if vs:
        ax.scatter([x] * len(vs), vs, s=10, color=color, alpha=0.6, marker=marker, zorder=3)


def _log(ax, which: str, base: float = 10) -> None:
    """A log ``which`` ("x" or "y") axis when the axes hold positive data there (a study with no value yet
    keeps a linear, empty axis instead of failing)."""
    lo, hi = getattr(ax.dataLim, f"interval{which}")
    if ax.has_data() and math.isfinite(lo) and math.isfinite(hi) and lo > 0:
        getattr(ax, f"set_{which}scale")("log", base=base)


def _finish(fig, axes, title: str):
    """The legend (each label once) below the panels and the wrapped title."""
    entries: dict = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(lab, h)
    fig.suptitle(wrap_title(title, 100), fontsize=10)
    legend_below(fig, list(entries.values()), list(entries), max_cols=4)
    return fig


def _chosen(sec: dict, objective: str) -> list[dict] | None:
    """The rows of a held-out study's table at the rate chosen for ``objective`` ("steps" or "accuracy") on
    the tuning seeds (a configuration with two chosen rates has a row for each); None without tuning grids
    (a one-stage run: every row)."""
    rates = {}
    for t in sec.get("tuning") or []:
        if t["objective"] == objective and t["choice"]:  # no choice: the family's tuning grid is incomplete
            net = dict(part.split("=", 1) for part in t["choice"]["network"])
            rates[(net.get("norm"), float(net.get("ghost") or 0), int(net["m"]))] = t["choice"]["rate"]
    if not rates:
        return None
    return [r for r in sec["table"] if rates.get((r["norm"], float(r.get("ghost") or 0), r["m"])) == r["lr"]]


def batch_size_figure(sec: dict):
    """Examples to 95% (log) and final test accuracy vs m (log2), one line per normalizer; ghost BN as
    separate markers at m = 60. In a held-out sweep each panel shows each configuration at the rate chosen on
    the tuning seeds for its quantity (examples to 95%: the "steps" objective; final accuracy: "accuracy")."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    panels = [(axes[0], _chosen(sec, "steps"), "to_target"), (axes[1], _chosen(sec, "accuracy"), "final")]
    held = panels[0][1] is not None
    for ax, rows, key in panels:
        rows = sec["table"] if rows is None else rows
        for norm in ("batch", "layer", "none", "ghost"):
            mine = sorted((r for r in rows if r["norm"] == norm), key=lambda r: (r["m"], r.get("ghost") or 0))
            if not mine:
                continue
            color, marker = _color(norm), "x" if norm == "ghost" else "o"
            for r in mine:
                x = r["m"] * (1.08 if norm == "ghost" and r.get("ghost") == 4 else 1.0)
                _points(ax, x, r, key, color, marker, 1 if key == "to_target" else 100)
                if key == "to_target" and r["reached"] < r["seeds"]:
                    ax.scatter([x], [sec.get("budget_examples", 240_000)], facecolors="none", edgecolors=color, s=40)
            if norm != "ghost":
                ax.plot([r["m"] for r in mine], [_mean(r[key]) for r in mine], "-", color=color, label=NAMES[norm])
            else:
                ax.scatter([], [], marker="x", color=color, label=caption("ghost_entry"))
        _log(ax, "x", 2)
        ax.set_xlabel(caption("study_axis", "m"))
    _log(axes[0], "y")
    axes[0].set_ylabel(caption("examples_axis", sec["target"]))
    axes[1].set_ylabel(caption("study_axis", "final"))
    return _finish(fig, axes, caption("study_title", "batch_size", held))


def inference_figure(sec: dict):
    """Moving-average minus batch-statistics accuracy and population minus moving-average accuracy vs m, one
    line per momentum."""
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    moms = sorted({r["momentum"] for r in sec["table"]}, reverse=True)
    for i, mom in enumerate(moms):
        mine = sorted((r for r in sec["table"] if r["momentum"] == mom), key=lambda r: r["m"])
        color = f"C{i}"
        for ax, key in ((a1, "gap"), (a2, "pop_minus_ema")):
            ax.plot([r["m"] for r in mine], [_mean(r[key]) for r in mine], "-o", color=color, markersize=3,
                    label=caption("momentum_entry", mom))
            for r in mine:
                if r[key].get("ci_low") is not None:
                    ax.vlines(r["m"], r[key]["ci_low"], r[key]["ci_high"], color=color, alpha=0.5)
    for ax, key in ((a1, "gap"), (a2, "pop_minus_ema")):
        _log(ax, "x", 2)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xlabel(caption("study_axis", "m"))
        ax.set_ylabel(caption("study_axis", key))
    return _finish(fig, (a1, a2), caption("study_title", "inference_statistics"))


def placement_figure(sec: dict):
    """Steps to the target (MLP 95%, CNN 97%) at each position's best rate, per (model, nonlinearity): a bar per
    position (BN before and after g: two shades of BN's family), seeds as points."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.2))
    colors = {"before": family_color("BN", 0.8), "after": family_color("BN", 0.45)}
    xs, labels = [], []
    for i, (model, act, pos) in enumerate(product(("mlp", "cnn"), ("sigmoid", "relu"), ("before", "after"))):
        r = next((r for r in sec["table"] if (r["model"], r["act"], r["position"]) == (model, act, pos)
                  and r.get("best")), None)
        if r is None:
            continue
        ax.bar(i, _mean(r["to_target"]) or 0, color=colors[pos], alpha=0.8, label=caption("placement_entry", pos))
        _points(ax, i, r, "to_target", "black")
        xs.append(i)
        lines = [caption("network_tick", model, act), pos, caption("rate_tick", r["lr"])]
        lines += [] if r["reached"] == r["seeds"] else [caption("reached_tick", r["reached"], r["seeds"])]
        labels.append("\n".join(lines))
    ax.set_xticks(xs, labels, fontsize=7)
    ax.set_ylabel(caption("study_axis", "placement_steps"))
    return _finish(fig, [ax], caption("study_title", "placement"))


def normalizer_figure(sec: dict):
    """Steps to 95% vs rate per normalizer (log-log), best rates circled. In a held-out sweep: each tuning
    grid (dashed, tuning-seed means; open markers: a tuning seed failed, counted at the budget; star: the
    chosen rate) and the evaluation seeds at the chosen rate (solid points, circle: their mean)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    # held-out tuning (docs/studies/PLAN.md): each grid's tuning-seed mean steps vs rate
    held, norms = False, {NAMES[k]: k for k in ("batch", "layer", "group", "none")}
    for t in sec.get("tuning") or []:
        norm = norms.get(t["family"])
        if norm is None or not t["choice"] or t["choice"]["objective"] != "steps":  # no choice: grid incomplete
            continue
        grid, color = t["choice"]["grid"], _color(norm)
        ax.plot([g["rate"] for g in grid], [g["mean_steps"] for g in grid], "--", color=color, alpha=0.6,
                linewidth=1.0)
        for g in grid:
            ax.scatter([g["rate"]], [g["mean_steps"]], s=14, color=color if not g["failed"] else "none",
                       edgecolors=color, zorder=3)
        best = next(g for g in grid if g["chosen"])
        ax.scatter([best["rate"]], [best["mean_steps"]], s=150, marker="*", color=color, zorder=4)
        held = True
    for norm in ("batch", "layer", "group", "none"):
        mine = sorted((r for r in sec["table"] if r["norm"] == norm), key=lambda r: r["lr"])
        if not mine:
            continue
        color = _color(norm)
        reached = [r for r in mine if r["reached"] == r["seeds"]]
        ax.plot([r["lr"] for r in reached], [_mean(r["to_target"]) for r in reached], "-o", color=color,
                markersize=3, label=NAMES[norm])
        for r in mine:
            _points(ax, r["lr"], r, "to_target", color)
            if r.get("best") and _mean(r["to_target"]):
                ax.scatter([r["lr"]], [_mean(r["to_target"])], s=120, facecolors="none", edgecolors=color)
    _log(ax, "x")
    _log(ax, "y")
    ax.set_xlabel(caption("study_axis", "lr"))
    ax.set_ylabel(caption("study_axis", "normalizer_steps"))
    return _finish(fig, [ax], caption("study_title", "normalizer", held))


def depth_figure(sec: dict):
    """Steps to 95% and final accuracy at each configuration's best rate vs depth."""
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.2))
    for norm in ("batch", "none"):
        best = sorted((r for r in sec["table"] if r["norm"] == norm and r.get("best")), key=lambda r: r["depth"])
        if not best:
            continue
        color = _color(norm)
        for ax, key, scale in ((a1, "to_target", 1), (a2, "final", 100)):  # "final": seed mean in %, seeds fractions
            ax.plot([r["depth"] for r in best], [_mean(r[key]) for r in best], "-o", color=color, label=NAMES[norm],
                    markersize=3)
            for r in best:
                _points(ax, r["depth"], r, key, color, scale=scale)
    for ax in (a1, a2):
        ax.set_xlabel(caption("study_axis", "depth"))
        ax.set_xticks([3, 6, 12])
    a1.set_ylabel(caption("study_axis", "depth_steps"))
    a2.set_ylabel(caption("study_axis", "depth_final"))
    return _finish(fig, (a1, a2), caption("study_title", "depth"))


FIGURES = {"batch_size": batch_size_figure, "inference_statistics": inference_figure,
           "placement": placement_figure, "normalizer": normalizer_figure, "depth": depth_figure}


def study_figure(sec: dict):
    """The figure of the study section ``sec`` (a matplotlib Figure).

    Raises:
        KeyError: an unknown study name.
    """
    return FIGURES[sec["name"]](sec)


def study_files(data: dict) -> dict[str, bytes]:
    """{file name: PNG bytes} of the study's figure ({} without a study section)."""
    sec = data.get("study")
    return {sec["figure"]: figure_png(study_figure(sec), 110)} if sec else {}


FIGURE = "frontier.png"


def frontier_figure(section: dict):
    """The Sec. 4.2 frontier figure (docs/cifar/PLAN.md) of ``section`` (:func:`bnexp.analysis.frontier.analyze`'s
    dict or report.json's data): left, each preset's final test accuracy (%) vs training budget (steps, log2 axis)
    with the target a*; right, the matched-accuracy speedup S(a) = B_baseline(a) / B_preset(a) of every preset
    with parity (1x) and the pass rule's :data:`~bnexp.analysis.frontier.PASS_FACTOR`. S(a) points that are bounds
    (a reached at a ladder's smallest budget) are open triangles (up: the preset's bound, S >= value; down: the
    baseline's, S <= value)."""
    fa = section["frontier_analysis"]
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5.2))
    names = sorted(fa["presets"], key=lambda p: ORDER.index(p) if p in ORDER else 99)
    cmap = plt.get_cmap("tab10")
    color = {p: cmap(i % 10) for i, p in enumerate(names)}
    handles = []
    for p in names:
        f = fa["presets"][p]
        (line,) = ax.plot(f["budgets"], [100 * a for a in f["mean_test_accuracy"]], "-o", color=color[p], ms=5,
                          lw=2 if p == BASELINE else 1.5)
        pts = [r for r in section["frontier"] if r["preset"] == p]
        ax.scatter([r["budget_steps"] for r in pts], [100 * r["final_test_accuracy"] for r in pts], s=14,
                   color=color[p], alpha=0.45, marker="x")
        handles.append(line)
        speedup = fa["speedup"].get(p) or {}
        curve = speedup.get("curve") or []
        exact = [(100 * c["accuracy"], c["speedup"]) for c in curve if c["bound"] == "exact"]
        if exact:
            bx.plot(*zip(*exact), "-", color=color[p], lw=1.5)
        for bound, marker in (("lower", "^"), ("upper", "v")):
            pts_b = [(100 * c["accuracy"], c["speedup"]) for c in curve if c["bound"] == bound]
            if pts_b:
                bx.scatter(*zip(*pts_b), marker=marker, s=16, facecolors="none", edgecolors=[color[p]])
        head = speedup.get("headline")
        if head and head["speedup"] is not None:
            bx.scatter([100 * head["accuracy"]], [head["speedup"]], marker="*", s=120, color=color[p], zorder=5)
    a_star = 100 * fa["target_accuracy"]
    ax.axhline(a_star, color="grey", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ticks = sorted({b for f in fa["presets"].values() for b in f["budgets"]})
    ax.set_xticks(ticks, [f"{b:,}" for b in ticks], rotation=45, fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel(caption("study_axis", "budget"))
    ax.set_ylabel(caption("study_axis", "final"))
    ax.set_title(caption("frontier_title", a_star), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    bx.axhline(1.0, color="grey", ls=":", lw=1)
    bx.axhline(PASS_FACTOR, color="black", ls="--", lw=1)
    bx.axvline(a_star, color="grey", ls=":", lw=1)
    bx.set_yscale("log", base=2)
    bx.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    bx.set_xlabel(caption("study_axis", "a"))
    bx.set_ylabel(caption("study_axis", "speedup"))
    bx.set_title(caption("speedup_title", PASS_FACTOR), fontsize=10)
    bx.grid(True, which="both", alpha=0.3)
    legend_below(fig, handles, names, max_cols=len(handles))
    return fig
