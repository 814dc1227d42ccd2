"""The percentile-band figure of the covariate-shift monitor's records (paper Fig. 1(b, c)): the median and
the outer percentiles of every hidden layer's input to the nonlinearity over training steps, and the BN
input Wu beside it. The run writes it as ``percentiles.png`` at its end (and into TensorBoard's Images)."""

from __future__ import annotations

import math

from bnexp.train.monitor import pkey


def plot_percentile_bands(history: list[dict], percentiles: list[float], title: str = ""):
    """Percentile bands over training steps, one row per layer (input to output), then the typical unit.

    Paper Fig. 1(b, c): the median (line) and the outer percentiles (band, 15-85 by default)
    of the input to the nonlinearity g. When the records hold the BN input Wu
    (``bn_input`` / ``bn_input_unit``), a second column shows it for the same layer.

    Args:
        history: records as in :attr:`bnexp.train.monitor.ShiftMonitor.history` (non-empty).
        percentiles: the recorded percentiles; the band is first..last, the line the middle one.
        title: figure title.

    Returns:
        a matplotlib Figure (Agg backend), 640 pixels wide at dpi 100 with one row per layer,
        so that it stays readable in TensorBoard's Images tab; every panel has labelled axes.

    Raises:
        ValueError: when ``history`` is empty.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        raise ValueError("no monitor records to plot")
    lo, mid, hi = (pkey(p) for p in (percentiles[0], percentiles[len(percentiles) // 2], percentiles[-1]))
    names = list(history[0]["layers"]) + ["unit"]
    with_bn = bool(history[0].get("bn_input"))
    cols = [("layers", "unit", "input to g", "pre-activation")] + (
        [("bn_input", "bn_input_unit", "BN input Wu", "Wu")] if with_bn else [])
    steps = [r["step"] for r in history]

    def finite(x):  # non-finite or missing values (null in JSON) are left out of the plot as gaps
        return x if isinstance(x, (int, float)) and math.isfinite(x) else float("nan")

    height = 1.7 * len(names) + 0.7
    fig, axes = plt.subplots(len(names), len(cols), figsize=(6.4 * len(cols) ** 0.5, height), squeeze=False,
                             sharex=True)
    for i, name in enumerate(names):
        for j, (layers_key, unit_key, what, ylabel) in enumerate(cols):
            ax = axes[i][j]
            rows = [r.get(unit_key) if name == "unit" else r.get(layers_key, {}).get(name) for r in history]
            pts = [(s, r) for s, r in zip(steps, rows) if r]
            if not pts:
                ax.set_axis_off()
                continue
            xs = [s for s, _ in pts]
            ax.fill_between(xs, [finite(r.get(lo)) for _, r in pts], [finite(r.get(hi)) for _, r in pts],
                            alpha=0.3, label=f"{lo}-{hi} band")
            ax.plot(xs, [finite(r.get(mid)) for _, r in pts], label=f"{mid} (median)")
            unit = history[0].get(unit_key) or {}
            where = (f"unit {unit.get('index')} of {unit.get('layer')}" if name == "unit" else f"{name}, all units")
            ax.set_title(f"{what}: {where}", fontsize=10)
            ax.set_ylabel(ylabel, fontsize=9)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3)
    for j in range(len(cols)):
        axes[-1][j].set_xlabel("training step")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=2, frameon=False)
    fig.suptitle(title or "input to the nonlinearity g on the probe set", fontsize=10, x=0.02, ha="left")
    _fixed_margins(fig, len(names), len(cols))
    return fig


def _fixed_margins(fig, rows: int, cols: int) -> None:
    """Margins and gaps in inches (room for the title and legend, tick labels, axis labels and panel titles):
    what ``tight_layout`` would find for these panels, without measuring every text (half the figure's cost)."""
    width, height = fig.get_size_inches()
    left, right, top, bottom, gap_h, gap_w = 0.8, 0.15, 0.7, 0.5, 0.42, 0.85
    axis_h = (height - top - bottom - (rows - 1) * gap_h) / rows
    axis_w = (width - left - right - (cols - 1) * gap_w) / cols
    fig.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height, bottom=bottom / height,
                        hspace=gap_h / axis_h, wspace=gap_w / axis_w)
