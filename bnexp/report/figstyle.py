"""How the report's figures draw and name a configuration: colour, line style, hatch, label.

One rule for every figure (accuracy, percentiles, stability, ICS):

* **hue** per *setting* -- the configuration without its ``bn.*`` keys and experiment name
  (:func:`bnexp.report.groups.pair_key`), so a BN configuration and its no-BN counterpart
  share one hue;
* **variant** within the hue: BN solid line / plain bar in the full colour, no BN dashed line
  / hatched bar in the same colour, noisy BN (Santurkar et al. 2018) dash-dot line / dotted
  bar in a darker shade of it;
* **label**: the configuration's label, with the variant added when the label does not say
  it already ("baseline (no BN)", "bn_x5_sigmoid (BN)"; "BN lr=0.5" stays as it is).

Also where the figures put their legends: below the panels (:func:`legend_below`), never
over the data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bnexp.report.groups import ConfigGroup, bn_variant, pair_key

LINESTYLE = {"BN": "-", "noisy BN": "-.", "no BN": "--", None: "-"}
HATCH = {"BN": None, "noisy BN": "..", "no BN": "//", None: None}
LINE_WORDS = {"BN": "BN solid", "noisy BN": "noisy BN dash-dot (darker)", "no BN": "no BN dashed"}
BAR_WORDS = {"BN": "BN plain", "noisy BN": "noisy BN dotted (darker)", "no BN": "no BN hatched"}


def style_note(groups: list[ConfigGroup], bars: bool = False) -> str:
    """How the legend tells the BN variants apart, naming only those in ``groups``: "BN solid, no BN
    dashed; one hue per setting" (line styles, or with ``bars`` the bar hatches); "" without variants."""
    present = {bn_variant(g) for g in groups}
    words = [w for v, w in (BAR_WORDS if bars else LINE_WORDS).items() if v in present]
    return ", ".join(words) + "; one hue per setting" if words else ""


@dataclass(frozen=True)
class Style:
    """How one configuration is drawn.

    Attributes:
        color: RGBA tuple (values in [0, 1]).
        linestyle: matplotlib line style of its curves.
        hatch: matplotlib hatch of its bars (None: plain).
        label: its legend label.
    """

    color: tuple
    linestyle: str
    hatch: str | None
    label: str


def _darker(rgba: tuple, f: float = 0.55) -> tuple:
    """``rgba`` with its red, green and blue scaled by ``f`` (same hue, darker shade)."""
    return tuple(c * f for c in rgba[:3]) + tuple(rgba[3:])


def _named_variant(label: str) -> str | None:
    """The BN variant a label names ("noisy BN", "no BN", "BN", or from bn=true/false/noisy), else None."""
    words = label.replace(":", " ").replace(",", " ").split()
    for w, v in (("bn=noisy", "noisy BN"), ("bn=false", "no BN"), ("bn=true", "BN")):
        if w in words:
            return v
    if "noisy BN" in label:
        return "noisy BN"
    if "no BN" in label:
        return "no BN"
    return "BN" if re.search(r"\bBN\b", label) else None


def legend_label(group: ConfigGroup) -> str:
    """The configuration's label, with its BN variant appended when the label does not name it.

    E.g. "baseline" (a no-BN preset) -> "baseline (no BN)", "bn_x5_sigmoid" -> "bn_x5_sigmoid
    (BN)"; "bn=true lr=0.5" and "noisy BN lr=0.5" are returned unchanged; a configuration
    whose bn.enabled is unknown keeps its label.
    """
    v = bn_variant(group)
    label = group.label or group.variant_label or "configuration"
    if v is None or _named_variant(label) == v:
        return label
    return f"{label} ({v})"


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend (imported on first use: the report's
    tables need no matplotlib)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def styles(groups: list[ConfigGroup]) -> dict[str, Style]:
    """{group.key: Style} for the configurations, hues in the order of first appearance.

    Up to 10 settings get tab10's colours, up to 20 tab20's; beyond that hues repeat.
    """
    plt = pyplot()
    keys: list[str] = []
    for g in groups:
        if pair_key(g) not in keys:
            keys.append(pair_key(g))
    cmap = plt.get_cmap("tab10" if len(keys) <= 10 else "tab20")
    hue = {k: tuple(cmap(i % cmap.N)) for i, k in enumerate(keys)}
    out = {}
    for g in groups:
        v = bn_variant(g)
        c = hue[pair_key(g)]
        out[g.key] = Style(_darker(c) if v == "noisy BN" else c, LINESTYLE[v], HATCH[v], legend_label(g))
    return out


def legend_below(fig, handles: list[Any], labels: list[str], title: str | None = None,
                 max_cols: int = 3) -> float:
    """Put one legend for the whole figure under its panels, outside every axes.

    As many columns (at most ``max_cols``) as fit the figure's width at font size 8 (about
    0.065 inch per character plus the line sample); the title is wrapped to the width.

    Returns:
        the fraction of the figure height the legend takes from the bottom; pass
        ``rect=(0, that, 1, top)`` to ``fig.tight_layout`` so the panels stay above it.
    """
    import textwrap

    if not handles:
        return 0.0
    width_in, height_in = fig.get_size_inches()
    entry_in = 0.065 * max(len(x) for x in labels) + 0.8
    ncol = max(1, min(max_cols, len(handles), int(0.95 * width_in // entry_in)))
    title_lines = textwrap.wrap(title, int(width_in / 0.065 * 0.9)) if title else []
    rows = -(-len(handles) // ncol) + len(title_lines)
    frac = min(0.45, (0.12 + 0.19 * rows) / height_in)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
               title="\n".join(title_lines) or None, title_fontsize=8, bbox_to_anchor=(0.5, 0.0))
    return frac
