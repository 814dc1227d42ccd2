"""How the report's figures draw and name a configuration, and which part of the paper they cite (:func:`refs`).

One rule for every figure: one colour family per BN variant (:data:`FAMILY`), so BN and no BN are told apart by
colour alone; within a family one shade per setting, darkest first (:func:`styles`); the line style and hatch
repeat the variant. Seeds are light thin lines of their configuration's colour, the mean over seeds a bold line.
Labels name the keys the sweep varies as the user typed them (:func:`typed_labels`, else :func:`legend_label`).
Legends go below the panels (:func:`legend_below`), never over the data, and describe only the variants present
(:func:`style_note`). The figures' words are the macros of templates/figure_titles.md.j2 (:func:`caption`).
"""

from __future__ import annotations

import io
import re
import textwrap
from dataclasses import dataclass
from typing import Any

from bnexp.report.fmt import macro
from bnexp.report.groups import ConfigGroup, bn_variant, following_keys, pair_key, sort_value
from bnexp.analysis.rules import BN_OPTIONS, NORMALIZERS, colour_family as colour_family_of, normalizer, variant
from bnexp.runfolders.resumecmd import as_typed
from bnexp.runfolders.rundir import run_overrides

TITLES = "figure_titles.md.j2"  # the figures' words
LINESTYLE = {"BN": "-", "noisy BN": "-.", "no BN": "--", None: "-"}
HATCH = {"BN": None, "noisy BN": "..", "no BN": "//", None: None}
# matplotlib colour maps: one family per BN variant (noisy BN: Santurkar et al. 2018; rules.NORMALIZERS names
# LayerNorm and GroupNorm), greys for an unknown one
FAMILY = {"no BN": "Blues", "BN": "Oranges", "noisy BN": "Greens", "LayerNorm": "Purples", "GroupNorm": "RdPu",
          None: "Greys"}
# override keys that never tell configurations apart in a legend (seeds are averaged; the rest is result-neutral)
UNTOLD = ("seed", "hydra.", "trainer.progress", "trainer.num_threads", "trainer.resume", "trainer.async_records",
          "trainer.device", "trainer.ckpt_every", "trainer.save_checkpoint", "data.root", "data.download",
          "data.verify_checksums", "logger", "monitor.histograms")


@dataclass(frozen=True)
class Style:
    """How one configuration is drawn: RGBA ``color``, ``linestyle`` of its curves, ``hatch`` of its
    bars (None: plain) and its legend ``label``."""

    color: tuple
    linestyle: str
    hatch: str | None
    label: str


def caption(name: str, *args, **kw) -> str:
    """The words of the macro ``name`` of templates/figure_titles.md.j2 for ``args`` and ``kw`` (paper references,
    counts, numbers and codes): a figure's title, a panel's title, an axis label, a note or a legend entry."""
    return macro(name, *args, template=TITLES, **kw)


PARTS = ("accuracy", "percentiles", "stability")  # the parts of the report that cite the paper (:func:`refs`)


def refs(data: dict) -> dict[str, str]:
    """The paper references of the report's parts (:data:`PARTS`), from report.json's ``data``: for a CIFAR-10
    sweep or one with the Sec. 4.2 baseline preset, Sec. 4.2 (Fig. 2 form) and, for the percentile views, Sec. 4.1's
    method applied to the Sec. 4.2 networks; else Sec. 4.1 (MNIST, Fig. 1(a) accuracy, Fig. 1(b, c) percentiles).
    The words are the macro ``paper_ref`` of templates/figure_titles.md.j2."""
    cifar = any(c.get("experiment") == "baseline" or str(c["config"].get("data.name", "")).lower().startswith("cifar")
                for c in data["configurations"])
    return {part: caption("paper_ref", "cifar" if cifar else "mnist", part) for part in PARTS}


def style_note(groups: list[ConfigGroup], bars: bool = False) -> str:
    """How the legend tells the BN variants apart, naming only those in ``groups``: "no BN blue dashed, BN
    orange solid, LayerNorm purple; one shade per setting" (or with ``bars`` the bar hatches); "" without
    variants. The BN variants and colour families present and whether there are several settings
    (:func:`~bnexp.report.groups.pair_key`) go to the macro ``style_note`` of templates/figure_titles.md.j2."""
    return caption("style_note", {bn_variant(g) for g in groups}, {colour_family(g) for g in groups},
                   len({pair_key(g) for g in groups}) > 1, bars=bars)


def step_label(log: bool = False) -> str:
    """The step axis's label, "training step (SGD updates)"; with ``log`` a symmetric-log axis's."""
    return caption("step_label", log=log)


def legend_label(group: ConfigGroup) -> str:
    """The configuration's label, with its BN variant appended when the label does not name it:
    "baseline" (a no-BN preset) -> "baseline (no BN)"; "bn=true lr=0.5" and "noisy BN lr=0.5" stay."""
    v, label = bn_variant(group), group.label or group.variant_label or "configuration"
    words = label.replace(":", " ").replace(",", " ").split()
    named = [variant(code) for option, code in BN_OPTIONS.items() if f"bn={option}" in words]
    named += [v for v in (variant("noisy"), variant("none")) if v in label]
    named_variant = named[0] if named else variant("batch") if re.search(r"\bBN\b", label) else None
    return label if v is None or named_variant == v else f"{label} ({v})"


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend (imported on first use)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def colour_family(group: ConfigGroup) -> str | None:
    """The colour family (:data:`FAMILY`) of a configuration: :func:`bnexp.analysis.rules.colour_family` of its
    normalizer (its BN variant; LayerNorm and GroupNorm by name)."""
    return colour_family_of(group.normalizer)


def typed_labels(groups: list[ConfigGroup]) -> dict[str, str]:
    """{group.key: label}: the overrides (``.hydra/overrides.yaml`` of each configuration's first run) whose
    values differ between the configurations, as the user typed them (``bn=false lr=0.5``; ``+`` and the
    quotes bnexp adds dropped, :func:`bnexp.runfolders.resumecmd.as_typed`; seeds, :data:`UNTOLD` keys and the
    keys :func:`~bnexp.report.groups.following_keys` leaves out); where LayerNorm or GroupNorm is among them, the
    ``bn`` and ``bn.norm`` overrides are replaced by the normalizer's name ("LayerNorm lr=0.9", not "bn=true
    bn.norm=layer lr=0.9"). {} when a configuration has no readable overrides or two configurations would read
    alike."""
    per: dict[str, dict[str, str]] = {}
    for g in groups:
        found = next((o for o in (run_overrides(r.path) for r in g.runs) if o is not None), None)
        if found is None:
            return {}
        pairs = (as_typed(o).lstrip("+~").partition("=") for o in found)
        per[g.key] = {key: value for key, _, value in pairs if key and not key.startswith(UNTOLD)}
    keys = dict.fromkeys(k for kv in per.values() for k in kv)
    varying = [k for k in keys if len({kv.get(k) for kv in per.values()}) > 1]
    drop = following_keys({k: [kv.get(k) for kv in per.values()] for k in varying}, budget_only=True)
    varying = [k for k in varying if k not in drop]
    named = {g.key: NORMALIZERS.get(normalizer(g.config) or "") for g in groups}
    if {"bn", "bn.norm"} & set(varying) and {"LayerNorm", "GroupNorm"} & set(named.values()):
        # "bn=true bn.norm=layer" -> "LayerNorm": the normalizer by its name (no BN, BN, LayerNorm, ...)
        varying = ["normalizer"] + [k for k in varying if k not in ("bn", "bn.norm")]
        per = {gk: {"normalizer": named[gk], **kv} for gk, kv in per.items()}
    labels = {gk: " ".join(kv[k] if k == "normalizer" else f"{k}={kv[k]}" for k in varying if kv.get(k) is not None)
              for gk, kv in per.items()}
    return labels if varying and len(set(labels.values())) == len(labels) else {}


def family_color(name: str | None, shade: float = 0.75) -> tuple:
    """The RGBA colour at ``shade`` (0..1, darker when higher) of the colour family ``name`` (:data:`FAMILY`;
    greys for an unknown one)."""
    return tuple(pyplot().get_cmap(FAMILY.get(name, "Greys"))(shade))


def styles(groups: list[ConfigGroup]) -> dict[str, Style]:
    """{group.key: Style}: the colour family of :func:`family`, within it one shade per setting
    (:func:`bnexp.report.groups.pair_key`, in the order settings first appear) and per ``bn.*`` values where
    several share a setting (noisy BN at three noise scales), darkest first; the variant's line style and hatch
    (BN solid / plain, no BN dashed / hatched, noisy BN dash-dot / dotted); the label of :func:`typed_labels`
    (else :func:`legend_label`)."""
    typed = typed_labels(groups)
    shade_key = {g.key: (pair_key(g), tuple((k, sort_value(v)) for k, v in sorted(g.config.items())
                                            if k.startswith("bn."))) for g in groups}
    per_family: dict[str | None, dict] = {}
    for g in groups:
        per_family.setdefault(colour_family(g), {})[shade_key[g.key]] = None
    shades = {}
    for fam, keys in per_family.items():
        settings = list(dict.fromkeys(k[0] for k in keys))
        shades[fam] = sorted(keys, key=lambda k: (settings.index(k[0]), k[1]))
    out = {}
    for g in groups:
        order, v = shades[colour_family(g)], bn_variant(g)
        n, i = len(order), order.index(shade_key[g.key])
        shade = 0.75 if n == 1 else 0.95 - 0.5 * i / (n - 1)  # darkest 0.95 to light 0.45
        color = family_color(colour_family(g), shade)
        out[g.key] = Style(color, LINESTYLE[v], HATCH[v], typed.get(g.key) or legend_label(g))
    return out


def legend_below(fig, handles: list[Any], labels: list[str], title: str | None = None, max_cols: int = 3) -> None:
    """Put one legend for the whole figure under its panels, outside every axes, in as many columns
    (at most ``max_cols``) as fit the width at font size 8; the title is wrapped to the width. The
    figure grows by the legend's height, so the panels keep their size however many entries there are;
    ``fig.tight_layout`` then fits the panels between the legend and the suptitle (it leaves the suptitle its
    room, so no caller reserves it)."""
    bottom = 0.0
    if handles:
        width_in, height_in = fig.get_size_inches()
        entry_in = 0.065 * max(len(x) for x in labels) + 0.8  # inches per entry: characters plus the line sample
        ncol = max(1, min(max_cols, len(handles), int(0.95 * width_in // entry_in)))
        title_lines = textwrap.wrap(title, int(width_in / 0.065 * 0.9)) if title else []
        rows = -(-len(handles) // ncol) + len(title_lines)
        fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False,
                   title="\n".join(title_lines) or None, title_fontsize=8, bbox_to_anchor=(0.5, 0.0))
        legend_in = 0.12 + 0.19 * rows
        extra_in = max(0.0, legend_in - 0.3 * height_in)  # up to 30% of the original height comes from the panels
        fig.set_size_inches(width_in, height_in + extra_in)
        bottom = legend_in / (height_in + extra_in)
    fig.tight_layout(rect=(0, bottom, 1, 1))


def figure_png(fig, dpi: int) -> bytes:
    """``fig`` drawn as PNG bytes at ``dpi``; the figure is closed."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=dpi)
    finally:
        pyplot().close(fig)
    return buf.getvalue()


def legend_title(*parts: str) -> str:
    """The legend title: the non-empty ``parts`` joined by "; "."""
    return "; ".join(p for p in parts if p)


def wrap_title(text: str, width: int) -> str:
    """``text`` wrapped onto lines of at most ``width`` characters (titles that fit their panel), each line's own
    line breaks kept; a parenthesis of at most half of ``width`` (a paper reference, "(Sec. 4.1, Fig. 1(b, c))")
    is never broken inside, so a reference is not split over two lines."""
    def glue(m: re.Match) -> str:
        return m.group(0).replace(" ", "\0") if len(m.group(0)) <= width // 2 else m.group(0)

    lines = []
    for part in text.split("\n"):
        glued = re.sub(r"\((?:[^()]|\([^()]*\))*\)", glue, part)
        lines += [line.replace("\0", " ") for line in textwrap.wrap(glued, width)] or [part]
    return "\n".join(lines) or text
