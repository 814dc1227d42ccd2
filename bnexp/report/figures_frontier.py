"""The Sec. 4.2 frontier figure (docs/cifar/PLAN.md): left, each preset's frontier (final test accuracy vs training
budget on a log2 axis; seed mean as a line, each seed as points) with the target a*; right, the
matched-accuracy speedup S(a) = B_baseline(a) / B_preset(a) of every preset, with parity (1x) and the
pass rule's 5x. Input: :func:`bnexp.report.frontier.analyze`'s dict (or report.json's data)."""

from __future__ import annotations

from bnexp.report.figstyle import legend_below, pyplot
from bnexp.report.frontier import BASELINE, ORDER, PASS_FACTOR

FIGURE = "frontier.png"


def frontier_figure(section: dict):
    """The frontiers (left) and the speedup curves S(a) (right) of ``section`` as a matplotlib figure.

    S(a) points that are bounds (a reached at a ladder's smallest budget) are drawn as open triangles
    (up: the preset's bound, S >= value; down: the baseline's, S <= value); exact points as a line.

    """
    fa = section["frontier_analysis"]
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 5.2))
    names = sorted(fa["presets"], key=lambda p: ORDER.index(p) if p in ORDER else 99)
    cmap = plt.get_cmap("tab10")
    color = {p: cmap(i % 10) for i, p in enumerate(names)}
    handles, labels = [], []
    for p in names:
        f = fa["presets"][p]
        (line,) = ax.plot(f["budgets"], [100 * a for a in f["mean_test_accuracy"]], "-o", color=color[p], ms=5,
                          lw=2 if p == BASELINE else 1.5)
        pts = [r for r in section["frontier"] if r["preset"] == p]
        ax.scatter([r["budget_steps"] for r in pts], [100 * r["final_test_accuracy"] for r in pts], s=14,
                   color=color[p], alpha=0.45, marker="x")
        handles.append(line)
        labels.append(p)
        curve = (fa["speedup"].get(p) or {}).get("curve") or []
        exact = [(100 * c["accuracy"], c["speedup"]) for c in curve if c["bound"] == "exact"]
        if exact:
            bx.plot(*zip(*exact), "-", color=color[p], lw=1.5)
        for bound, marker in (("lower", "^"), ("upper", "v")):
            pts_b = [(100 * c["accuracy"], c["speedup"]) for c in curve if c["bound"] == bound]
            if pts_b:
                bx.scatter(*zip(*pts_b), marker=marker, s=16, facecolors="none", edgecolors=[color[p]])
        head = (fa["speedup"].get(p) or {}).get("headline")
        if head and head["speedup"] is not None:
            bx.scatter([100 * head["accuracy"]], [head["speedup"]], marker="*", s=120, color=color[p], zorder=5)
    a_star = 100 * fa["target_accuracy"]
    ax.axhline(a_star, color="grey", ls=":", lw=1)
    ax.set_xscale("log", base=2)
    ticks = sorted({b for f in fa["presets"].values() for b in f["budgets"]})
    ax.set_xticks(ticks, [f"{b:,}" for b in ticks], rotation=45, fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("training budget (SGD steps, log2 axis; the rate halves 5 times over each run's budget)")
    ax.set_ylabel("final test accuracy (%)")
    ax.set_title(f"Frontiers: seed mean (line), each seed (x); a* = {a_star:.2f}% (dotted)", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    bx.axhline(1.0, color="grey", ls=":", lw=1)
    bx.axhline(PASS_FACTOR, color="black", ls="--", lw=1)
    bx.axvline(a_star, color="grey", ls=":", lw=1)
    bx.set_yscale("log", base=2)
    bx.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
    bx.set_xlabel("test accuracy a (%)")
    bx.set_ylabel("S(a) = B_baseline(a) / B_preset(a)")
    bx.set_title(f"Speedup S(a); * = S(a*), dashed = pass rule {PASS_FACTOR:g}x, triangles = bounds", fontsize=10)
    bx.grid(True, which="both", alpha=0.3)
    frac = legend_below(fig, handles, labels, max_cols=len(handles))
    fig.tight_layout(rect=(0, frac, 1, 1))
    return fig
