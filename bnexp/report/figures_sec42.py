"""The matched-accuracy figure of Sec. 4.2: for each accuracy level (a fraction of the tuned
baseline's plateau accuracy), baseline steps / preset steps, one line per preset."""

from __future__ import annotations

import io
from pathlib import Path

from bnexp.report.build import Report
from bnexp.report.figstyle import pyplot
from bnexp.rundir import atomic_write_bytes

FIGURE = "matched_accuracy.png"


def plot_matched_accuracy(report: Report, path: Path) -> None:
    """Write the matched-accuracy speedup curve of ``report.data["sec42_matched"]`` to ``path`` (PNG,
    atomically). Levels a preset never reached are left out of its line; the pass rule's 5x and
    parity (1x) are drawn as horizontal lines.

    Raises:
        OSError: when ``path`` cannot be written.
    """
    sec = report.data["sec42_matched"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    levels = [100 * lv for lv in sec["curve_levels"]]
    for row in sec["rows"][1:]:
        pts = [(lv, v) for lv, v in zip(levels, row["curve"]) if v is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", ms=3, label=row["label"])
    ax.axhline(1.0, color="grey", lw=1, ls=":", label="parity (1x)")
    ax.axhline(5.0, color="black", lw=1, ls="--", label="pass rule (5x, BN-x5)")
    ax.set_yscale("log")
    ax.set_xlabel(f"test accuracy, % of the baseline's plateau ({100 * sec['target']:.2f}%)")
    ax.set_ylabel("baseline steps / preset steps")
    ax.set_title("Matched-accuracy speedup over the tuned baseline (Sec. 4.2)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
