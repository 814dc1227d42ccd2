"""The figures' words (bnexp/report/templates/figure_titles.md.j2, rendered by bnexp.report.figstyle.caption): each
title, panel title, axis label, note, legend entry and paper reference for known numbers, and the titles of figures
rendered from a small sweep. The expected strings are the ones the figures wrote while their words were constants
and f-strings in figstyle.py, figures.py, figures_ics.py and figures_studies.py (the move into the template kept
them character for character).
"""

from __future__ import annotations

import pytest

from test_report import make_ics_run

from bnexp.report import build_report
from bnexp.report.figstyle import caption, refs
from bnexp.report.figures import accuracy_figure, percentiles_figure, stability_figure

pytest.importorskip("matplotlib")

S41A, S41BC = "Sec. 4.1, Fig. 1(a)", "Sec. 4.1, Fig. 1(b, c)"
CIFAR_VIEW = "Sec. 4.1's Fig. 1(b, c) view, on CIFAR-10"


@pytest.mark.parametrize("name, args, kw, want", [
    ("accuracy_title", (S41A,), {}, "Test accuracy vs training steps (Sec. 4.1, Fig. 1(a))"),
    ("accuracy_title", ("Sec. 4.2, Fig. 2 form, on CIFAR-10",), {"columns": True},
     "Test accuracy vs training steps (Sec. 4.2, Fig. 2 form, on CIFAR-10): one column per normalizer, the same "
     "axes in each"),
    ("accuracy_note", (), {}, "bold: mean over seeds, shaded: its 95% Student-t band, light: each seed"),
    ("family_note", (), {},
     "bold: mean over seeds, shaded: its 95% Student-t band, light: each seed; light to dark in legend order"),
    ("zoom_title", (96.94, 98.75), {}, "top of the range (zoom): 96.9-98.8%"),  # one decimal, as "{:.1f}"
    ("curve_entry", ("BN lr=0.5", 3), {}, "BN lr=0.5 (n=3)"),
    ("family_panel", ("BN", 8, 8), {}, "BN"),
    ("family_panel", ("LayerNorm", 8, 9), {}, "LayerNorm: 8 of 9 configurations"),
    ("family_panel", (None, 2, 2), {}, "unknown normalizer"),
    ("family_panel", ("no BN", 3, 5), {"zoom": True}, "no BN: top of the range (zoom)"),
    ("family_panel", (None, 1, 1), {"zoom": True}, "unknown normalizer: top of the range (zoom)"),
    ("percentiles_title", (S41BC, 3, 3), {},
     "A typical unit of the last hidden layer over training (Sec. 4.1, Fig. 1(b, c)); per setting raw units, then "
     "relative to the unit's start"),
    ("percentiles_title", (CIFAR_VIEW, 2, 11), {},
     "A typical unit of the last hidden layer over training (Sec. 4.1's Fig. 1(b, c) view, on CIFAR-10); 2 of 11 "
     "settings (report.md lists all); per setting raw units, then relative to the unit's start"),
    ("stability_title", (S41BC, 6, 6), {},
     "How far each layer's input distribution moved, first to last monitor step (Sec. 4.1, Fig. 1(b, c))"),
    ("stability_title", (S41BC, 8, 12), {},
     "How far each layer's input distribution moved, first to last monitor step (Sec. 4.1, Fig. 1(b, c)); 8 of 12 "
     "configurations (the longest run of each; report.md lists all)"),
    ("unit_panel", ("unit", 0, 3, "layer3"), {}, "seed 0, unit 3 of layer3"),
    ("unit_panel", ("unit", 1, None, None), {}, "seed 1, unit None of None"),  # a record without index or layer
    ("unit_panel", ("no_records",), {}, "no shift.jsonl records"),
    ("unit_panel", ("no_spread",), {}, "initial 15-85 spread is 0: no relative view"),
    ("missing_runs", ([],), {}, ""),
    ("missing_runs", (["no BN"],), {}, " (no run without BN with these settings)"),
    ("missing_runs", (["BN", "noisy BN", "configuration"],), {},
     " (no run with BN or with noisy BN or of unknown BN with these settings)"),
    ("missing_runs", (["LayerNorm", "GroupNorm", "BN after g"],), {},
     " (no run with LayerNorm or with GroupNorm or with BN after g with these settings)"),
    ("percentile_entry", ("band",), {"low": "15", "high": "85"}, "15-85th percentile band"),
    ("percentile_entry", ("median",), {"mid": "50"}, "median (50th)"),
    ("shown_note", ("held_out", 0.95, [0, 1, 2, 3, 4]), {},
     "each network at the rate it chose for 95% on the tuning seeds; evaluation seeds 0, 1, 2, 3, 4"),
    ("shown_note", ("held_out", 0.975, [7]), {}, "each network at the rate it chose for 98% on the tuning seeds; "
     "evaluation seeds 7"),  # as f"{0.975:.0%}" writes it
    ("shown_note", ("study", 0.95, [1000, 1001]), {},
     "the configurations the evaluation seeds ran (stage 2: each at its rate chosen on the tuning seeds); "
     "evaluation seeds 1000, 1001"),
    # the words that were constants and f-strings of figstyle.py, figures.py, figures_ics.py and figures_studies.py
    ("paper_ref", ("mnist", "accuracy"), {}, S41A),
    ("paper_ref", ("mnist", "stability"), {}, S41BC),
    ("paper_ref", ("cifar", "accuracy"), {}, "Sec. 4.2, Fig. 2 form, on CIFAR-10"),
    ("paper_ref", ("cifar", "percentiles"), {}, CIFAR_VIEW),
    ("style_note", ({"BN", "no BN", None}, {"BN", "no BN"}, True), {},
     "no BN blue dashed, BN orange solid; one shade per setting"),
    ("style_note", ({"noisy BN", "BN"}, {"noisy BN", "BN"}, False), {"bars": True},
     "BN orange plain, noisy BN green dotted"),
    ("style_note", ({"BN"}, {"BN", "LayerNorm", "GroupNorm"}, True), {},
     "BN orange solid, LayerNorm purple, GroupNorm magenta; one shade per setting"),
    ("style_note", ({None}, {None}, True), {}, ""),  # no variant named: no note, not a lone "; one shade ..."
    ("step_label", (), {}, "training step (SGD updates)"),
    ("step_label", (), {"log": True}, "training step (SGD updates, log axis)"),
    ("seed_mean_note", (), {}, "mean over finished seeds"),
    ("percentile_axis", (False,), {}, "raw: input to the nonlinearity"),
    ("percentile_unit", (True,), {}, "(initial 15-85 spreads, symlog)"),
    ("stability_axis", ("median_shift",), {}, "|median end - median first|"),
    ("stability_unit", ("spread_ratio",), {}, "(ratio; 1 = unchanged)"),
    ("ics_axis", ("l2",), {}, "||G - G'||_2 (nats per weight unit)"),
    ("ics_axis", ("w1_last",), {}, "W1 (pre-activation, a.u.)"),  # another W1 variant: pre-activation units
    ("ics_axis", ("new_measure",), {}, ""),  # unknown: nothing (figures_ics.axis_label raises KeyError)
    ("ics_panel", ("cos",), {}, "cos(G, G') (Def. 2.1, Fig. 3), layers 2..K"),
    ("ics_panel", ("l2",), {}, "||G - G'||_2 (Def. 2.1, raw), layers 2..K"),
    ("ics_panel", ("l2_rel_per_move",), {}, "||G - G'|| / ||G|| per move (normalized, not Def. 2.1), layers 2..K"),
    ("ics_title", ("grad",), {},
     "Gradient-based ICS: Santurkar et al. 2018's Def. 2.1 as defined, and a normalized variant"),
    ("study_title", ("batch_size",), {}, "Mini-batch size at a fixed number of examples (lr = 0.01 m)"),
    ("study_title", ("normalizer", True), {},
     "Normalizers on the paper's MNIST net: tuning grids (dashed, seeds 100-102; star: chosen rate), evaluation "
     "seeds at the chosen rate (points; circle: mean)"),
    ("study_title", ("depth",), {}, "Depth: BN vs no BN, each at its best rate"),
    ("study_axis", ("budget",), {},
     "training budget (SGD steps, log2 axis; the rate halves 5 times over each run's budget)"),
    ("examples_axis", (0.95,), {}, "examples to 95% (open: not reached)"),  # as f"{100 * 0.95:g}" writes it
    ("examples_axis", (0.975,), {}, "examples to 97.5% (open: not reached)"),
    ("momentum_entry", (0.001,), {}, "momentum 0.001"),
    ("placement_entry", ("after",), {}, "BN after g"),
    ("network_tick", ("cnn", "relu"), {}, "CNN relu"),
    ("rate_tick", (0.25,), {}, "lr 0.25"),
    ("reached_tick", (2, 3), {}, "2/3 reached"),
    ("frontier_title", (78.456,), {}, "Frontiers: seed mean (line), each seed (x); a* = 78.46% (dotted)"),
    ("speedup_title", (2.0,), {}, "Speedup S(a); * = S(a*), dashed = pass rule 2x, triangles = bounds"),
])
def test_each_caption_for_known_numbers(name, args, kw, want):
    assert caption(name, *args, **kw) == want


def test_refs_name_the_paper_part_per_dataset():
    """report.md's captions (f.refs) and the titles cite Sec. 4.2 for a CIFAR-10 sweep or one with the baseline
    preset, Sec. 4.1 otherwise."""
    mnist = {"configurations": [{"config": {"data.name": "mnist"}}]}
    cifar = {"configurations": [{"config": {"data.name": "mnist"}}, {"config": {"data.name": "CIFAR10"}}]}
    preset = {"configurations": [{"config": {}, "experiment": "baseline"}]}
    assert refs(mnist) == {"accuracy": S41A, "percentiles": S41BC, "stability": S41BC}
    want = {"accuracy": "Sec. 4.2, Fig. 2 form, on CIFAR-10", "percentiles": CIFAR_VIEW, "stability": CIFAR_VIEW}
    assert refs(cifar) == want and refs(preset) == want


def test_the_template_writes_each_phrase_without_a_newline_around_it():
    """Every macro's words for a few arguments: no leading or trailing whitespace (Python breaks the lines)."""
    for name, args in [("study_title", (n, h)) for n in ("batch_size", "inference_statistics", "placement",
                                                          "normalizer", "depth") for h in (False, True)] + \
            [("ics_title", (v,)) for v in ("shift", "grad", "land")] + [("style_note", ({"BN"}, {"BN"}, True))]:
        text = caption(name, *args)
        assert text and text == text.strip() and "\n" not in text, (name, args, text)


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """BN, noisy BN and no BN at lr 0.5 and 0.12, seeds 0 and 1 (test_report_figures' sweep)."""
    root = tmp_path_factory.mktemp("titles") / "mnist"
    for lr in (0.5, 0.12):
        for variant in ("BN", "noisy BN", "no BN"):
            for seed in (0, 1):
                make_ics_run(root, variant, lr, seed)
    return build_report(root)


def _titles(fig) -> tuple[str, list[str], list[list[str]]]:
    return (fig._suptitle.get_text(), [a.get_title() for a in fig.axes],
            [[leg.get_title().get_text()] + [t.get_text() for t in leg.get_texts()] for leg in fig.legends])


@pytest.mark.slow  # renders three figures (> 2.5 s of CPU)
def test_titles_of_the_figures_of_a_small_sweep(mnist):
    sup, axes, legends = _titles(accuracy_figure(mnist))
    assert sup == "Test accuracy vs training steps (Sec. 4.1, Fig. 1(a))"
    assert axes == ["whole range", "top of the range (zoom): 96.9-98.8%"]
    assert legends == [["bold: mean over seeds, shaded: its 95% Student-t band, light: each seed; no BN blue dashed, "
                        "BN orange solid, noisy BN green dash-dot; one shade per\nsetting"]
                       + [f"{v} lr={lr} (n=2)" for lr in (0.12, 0.5) for v in ("BN", "noisy BN", "no BN")]]
    sup, axes, legends = _titles(percentiles_figure(mnist))
    assert sup == ("A typical unit of the last hidden layer over training (Sec. 4.1, Fig. 1(b, c)); per setting raw "
                   "units, then relative to the unit's start")
    assert axes == [f"{v} lr={lr}\nseed 0, unit 0 of layer3" for lr in (0.12, 0.5) for _ in range(2)
                    for v in ("no BN", "BN", "noisy BN")]
    assert legends == [["", "15-85th percentile band", "median (50th)"]]
    sup, axes, _ = _titles(stability_figure(mnist))
    assert sup == "How far each layer's input distribution moved, first to last monitor step (Sec. 4.1, Fig. 1(b, c))"
    assert axes == ["how far the median moved", "how the 15-85 spread changed"]

