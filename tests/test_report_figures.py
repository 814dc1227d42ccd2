"""The report's figures, inspected as matplotlib objects.

Synthetic sweeps (the builders of test_report.py): BN, noisy BN and no BN at two learning
rates, plus a BN setting without a no-BN counterpart, and CIFAR-10 presets. Checked on the
Figure objects: every axis has an x and a y label with its unit in parentheses, the accuracy
figure has a zoomed panel on the top of the range, no visible axes is empty, legends lie
below every axes (outside the data), each BN variant has its own colour family (a shade per
setting) and line style, seeds are light lines, labels name what they show, and titles cite the
right part of the paper (MNIST: Sec. 4.1, Fig. 1; CIFAR-10: Sec. 4.2).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from test_report import BN_05, make_ics_run, make_run

from bnexp.report import build_report
from bnexp.report.figures import (accuracy_figure, percentiles_figure, stability_figure, stability_figure_of,
                                  zoom_range)
from bnexp.report.figures_ics import ICS_PLOTS, axis_label, ics_figure
from bnexp.report.figstyle import legend_label

pytest.importorskip("matplotlib")

UNIT = re.compile(r"\([^()]+\)\s*$")  # a label ending with its unit in parentheses


@pytest.fixture(autouse=True)
def _close_figures():
    """Each test's figures are closed after it (pyplot keeps them open; a worker of many figure tests would
    warn about more than 20)."""
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.fixture
def mnist(tmp_path) -> Path:
    """BN, noisy BN, no BN at lr 0.5 and 0.12 (seeds 0, 1; every ICS measurement), and BN at
    lr=5 alone (no no-BN run with its settings)."""
    root = tmp_path / "mnist"
    for lr in (0.5, 0.12):
        for variant in ("BN", "noisy BN", "no BN"):
            for seed in (0, 1):
                make_ics_run(root, variant, lr, seed)
    return root


@pytest.fixture
def cifar(tmp_path) -> Path:
    """CIFAR-10 presets: baseline (no BN) and bn_baseline, two seeds each."""
    root = tmp_path / "cifar"
    kw = dict(max_steps=4000, every=500, model="cnn", data="cifar10", targets=[0.5])
    for seed in (0, 1):
        make_run(root, f"baseline,seed={seed}", bn=False, lr=0.02, seed=seed, experiment="baseline",
                 knots=[(0, 0.1), (2000, 0.45), (4000, 0.5)], **kw)
        make_run(root, f"bn_baseline,seed={seed}", bn=True, lr=0.02, seed=seed, experiment="bn_baseline",
                 knots=[(0, 0.1), (1000, 0.5), (3000, 0.55)], **kw)
    return root


def _visible(fig):
    return [a for a in fig.axes if a.get_visible() and a.axison]


def _has_data(ax) -> bool:
    return bool(ax.get_lines() or ax.collections or ax.patches)


def _check_axes_and_legend(fig) -> None:
    """Every visible axes: labelled x and y with units, some data; the figure's legends lie
    below every axes (incl. its tick and axis labels) and no axes has a legend of its own."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    axes = _visible(fig)
    assert axes
    for ax in axes:
        assert UNIT.search(ax.get_xlabel()), ax.get_xlabel()
        assert UNIT.search(ax.get_ylabel()), ax.get_ylabel()
        assert _has_data(ax), ax.get_title()
        assert ax.get_legend() is None, ax.get_title()
    lowest = min(ax.get_tightbbox(renderer).y0 for ax in axes)
    for leg in fig.legends:
        assert leg.get_window_extent(renderer).y1 <= lowest + 1  # pixels; below the panels
    # titles fit: the suptitle inside the figure
    if fig._suptitle is not None:
        bb = fig._suptitle.get_window_extent(renderer)
        assert bb.x0 >= 0 and bb.x1 <= fig.bbox.width


@pytest.mark.slow  # renders figures (> 2.5 s of CPU)
def test_accuracy_figure_has_a_zoomed_top_panel_units_and_paired_colours(mnist):
    report = build_report(mnist)
    fig = accuracy_figure(report)
    _check_axes_and_legend(fig)
    full, zoom = _visible(fig)
    assert full.get_ylabel() == zoom.get_ylabel() == "test accuracy (%)"
    assert "zoom" in zoom.get_title()
    # every configuration ends between 96% and 98.7%: the zoom shows all their ends in a few
    # points, not 10-100%
    lo, hi = zoom.get_ylim()
    means = [ln for ln in zoom.get_lines() if ln.get_linewidth() == 2.0]  # bold: the means over seeds
    seeds = [ln for ln in zoom.get_lines() if ln.get_linewidth() < 1 and ln.get_alpha() < 0.5]  # light: each seed
    assert len(seeds) == 12  # 6 configurations x 2 seeds, each its own light line
    ends = [ln.get_ydata()[-1] for ln in means]
    assert len(ends) == 6 and all(96 <= e <= 98.7 for e in ends)
    assert lo < min(ends) and max(ends) < hi <= 100 and hi - lo < 6
    assert full.get_ylim()[0] < 15
    # 100 to 20,000 evaluated steps: a log step axis, step 0 still on it, so BN's early lead is not one sliver;
    # the zoom, from about 1,000 steps to 20,000, stays linear
    assert full.get_xscale() == "symlog" and full.get_xlim()[0] <= 0 and zoom.get_xscale() == "linear"
    assert full.get_xlabel() == "training step (SGD updates, log axis)"
    assert zoom.get_xlabel() == "training step (SGD updates)"
    # one legend entry per configuration; BN and no BN in their own colour families, a shade per setting
    labels = fig.legends[0].texts
    entries = {t.get_text().rsplit(" (n=", 1)[0] for t in labels}
    assert entries == {"BN lr=0.5", "noisy BN lr=0.5", "no BN lr=0.5", "BN lr=0.12", "noisy BN lr=0.12",
                       "no BN lr=0.12"}
    lines = {ln.get_label().rsplit(" (n=", 1)[0]: ln for ln in full.get_lines() if not ln.get_label().startswith("_")}
    rgb = {k: ln.get_color()[:3] for k, ln in lines.items()}
    assert rgb["BN lr=0.5"] != rgb["BN lr=0.12"] and rgb["no BN lr=0.5"] != rgb["no BN lr=0.12"]
    # BN orange (red > blue), no BN blue (blue > red), noisy BN green (green highest)
    assert all(rgb[f"BN lr={lr}"][0] > rgb[f"BN lr={lr}"][2] for lr in ("0.5", "0.12"))
    assert all(rgb[f"no BN lr={lr}"][2] > rgb[f"no BN lr={lr}"][0] for lr in ("0.5", "0.12"))
    assert all(max(rgb[f"noisy BN lr={lr}"]) == rgb[f"noisy BN lr={lr}"][1] for lr in ("0.5", "0.12"))
    for name in lines:  # each configuration's two seeds: light lines of its colour
        assert len([ln for ln in full.get_lines() if ln.get_linewidth() < 1 and ln.get_color()[:3] == rgb[name]]) == 2
    styles = {k: lines[k + " lr=0.5"].get_linestyle() for k in ("BN", "noisy BN", "no BN")}
    assert len(set(styles.values())) == 3 and styles["BN"] == "-" and styles["no BN"] == "--"
    assert "Sec. 4.1, Fig. 1(a)" in fig._suptitle.get_text()


@pytest.mark.slow  # renders figures (> 2.5 s of CPU)
def test_legends_name_only_the_variants_in_the_sweep(mnist, tmp_path):
    def titles(report):
        return [leg.get_title().get_text().replace("\n", " ") for make in (accuracy_figure, stability_figure)
                for leg in make(report).legends]

    plain = tmp_path / "plain"
    for seed in (0, 1):
        make_run(plain, f"bn=true,{seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed])
        make_run(plain, f"bn=false,{seed}", bn=False, lr=0.5, seed=seed, knots=BN_05[seed])
    without = titles(build_report(plain))
    assert len(without) == 2 and not any("noisy" in t for t in without)
    assert "no BN blue dashed, BN orange solid" in without[0] and "no BN blue hatched, BN orange plain" in without[1]
    assert "shade per setting" not in without[0]  # one setting: no shades to tell apart
    with_noisy = titles(build_report(mnist))
    assert "noisy BN green dash-dot" in with_noisy[0] and "noisy BN green dotted" in with_noisy[1]
    assert "one shade per setting" in with_noisy[0]


def test_zoom_range_by_hand():
    # finals 98 and 97 (and 10, far below: left out); top of the bands 98.5 -> span 1.5
    lo, hi = zoom_range([([50, 98], [51, 98.5]), ([40, 97], [41, 97.2]), ([10, 10], [11, 11])])
    assert lo == pytest.approx(97 - 0.35 * 1.5) and hi == pytest.approx(98.5 + 0.15 * 1.5)
    assert zoom_range([([50, 60], [50, 60.2])], min_span=1.0) == pytest.approx((60 - 0.35, 60.2 + 0.15))
    assert zoom_range([]) is None


@pytest.mark.slow  # renders figures (> 2.5 s of CPU)
def test_percentile_figure_one_column_per_variant_no_empty_panel(mnist):
    root = mnist
    make_run(root, "bn=true,lr=5,seed=0", bn=True, lr=5.0, seed=0, knots=BN_05[0])  # no no-BN counterpart
    report = build_report(root)
    fig = percentiles_figure(report)
    _check_axes_and_legend(fig)
    axes = _visible(fig)
    assert len(axes) == 12  # the 2 settings with every variant, 3 variants each, raw and relative; BN lr=5 left out
    assert not [a for a in fig.axes if not a.get_visible()]  # no hidden (empty) panel either
    titles = [a.get_title() for a in axes]
    first_lines = [" ".join(t.split("\n")[:-1]) for t in titles]
    assert first_lines[:6] == ["no BN lr=0.12", "BN lr=0.12", "noisy BN lr=0.12"] * 2
    assert not any("lr=5" in t or "no run" in t for t in titles)
    assert "2 of 3 settings" in fig._suptitle.get_text()
    # one y scale per row: no BN and BN of a setting compare directly
    assert axes[0].get_ylim() == axes[1].get_ylim() == axes[2].get_ylim()
    assert axes[3].get_ylim() == axes[4].get_ylim() == axes[5].get_ylim()
    assert [a.get_ylabel().split(":")[0] for a in axes[:6]] == ["raw"] * 3 + ["relative"] * 3


def test_percentile_figure_rows_fit_a_screen():
    """At most two settings (two rows each: raw and relative), those with every variant, spread over the list
    (first, last)."""
    from bnexp.report.figures import MAX_PERCENTILE_ROWS, shown_rows

    full = [{"no BN": f"n{i}", "BN": f"b{i}"} for i in range(7)]
    rows = full[:3] + [{"BN": "lone"}] + full[3:]
    assert MAX_PERCENTILE_ROWS == 2
    assert shown_rows(["no BN", "BN"], rows) == [full[0], full[6]]
    assert shown_rows(["no BN", "BN"], full[:2] + [{"BN": "lone"}]) == full[:2]
    assert shown_rows(["no BN", "BN"], [{"BN": "a"}, {"no BN": "b"}]) == [{"BN": "a"}, {"no BN": "b"}]
    # no setting with all three: those with the most variants, not a lone BN panel
    assert shown_rows(["no BN", "BN", "LayerNorm"], [{"BN": "a"}, {"no BN": "b", "LayerNorm": "c"}, {"BN": "d"}]) \
        == [{"no BN": "b", "LayerNorm": "c"}]


@pytest.mark.slow  # renders a figure (> 2.5 s of CPU)
def test_percentile_figure_relative_view_is_the_band_over_its_initial_spread(tmp_path):
    # test_report._shift: no BN's median drifts from 0 to 0.3 + 0.1 * seed, its 15-85 spread grows from 2 to 3;
    # BN's stays at median 0, spread 2. Relative: (percentile - initial median) / initial spread.
    root = tmp_path / "s"
    for bn in (True, False):
        make_run(root, f"bn={bn},seed=0", bn=bn, lr=0.5, seed=0, knots=BN_05[0])
    recs = [json.loads(line) for line in (root / "bn=False,seed=0" / "shift.jsonl").read_text().splitlines()]
    p15, p50, p85 = (np.array([r["unit"][k] for r in recs]) for k in ("p15", "p50", "p85"))
    fig = percentiles_figure(build_report(root))
    _check_axes_and_legend(fig)
    axes = _visible(fig)  # columns no BN, BN; rows raw, relative
    assert [a.get_ylabel().split(":")[0] for a in axes] == ["raw", "raw", "relative", "relative"]
    raw, rel = axes[0], axes[2]
    np.testing.assert_allclose(raw.get_lines()[0].get_ydata(), p50)
    np.testing.assert_allclose(rel.get_lines()[0].get_ydata(), (p50 - p50[0]) / (p85[0] - p15[0]))
    band = rel.collections[0].get_paths()[0].vertices[:, 1]
    lo, hi = (p15 - p50[0]) / 2.0, (p85 - p50[0]) / 2.0  # the initial spread is 2: the band starts at -0.5..0.5
    assert (lo[0], hi[0]) == (-0.5, 0.5)
    assert band.min() == pytest.approx(lo.min()) and band.max() == pytest.approx(hi.max())
    assert fig.get_size_inches()[1] * 100 <= 1000  # percentiles.png's dpi: at most 1,000 px tall


def test_percentile_figure_pairs_no_bn_with_plain_bn_and_across_rates_when_asked():
    """In a setting with ghost-batch BN, LayerNorm and plain BN, plain BN shares the row with no BN whatever the
    order, LayerNorm has a column of its own; with ignore=("lr",) (a held-out sweep: each at its own rate) BN
    and no BN of one m pair up."""
    from bnexp.report.figures import figure_rows
    from bnexp.report.groups import ConfigGroup

    def g(key, bn, lr, **kw):
        return ConfigGroup(key, {"bn.enabled": bn, "lr": lr, "trainer.batch_size": 60, **kw})

    ghost, layer = g("ghost", True, 0.9, **{"bn.ghost_batch_size": 2}), g("layer", True, 0.9, **{"bn.norm": "layer"})
    plain, plain_b = g("plain", True, 0.9), g("plain_b", True, 5.4)
    no_bn = g("no_bn", False, 0.9)
    columns, rows = figure_rows([ghost, layer, no_bn, plain])
    assert columns == ["no BN", "BN", "LayerNorm"]
    assert [{c: x.key for c, x in r.items()} for r in rows] == [{"LayerNorm": "layer", "no BN": "no_bn",
                                                                  "BN": "plain"}, {"BN": "ghost"}]
    assert len(figure_rows([no_bn, plain_b])[1]) == 2  # other rates: two settings
    assert [{c: x.key for c, x in r.items()} for r in figure_rows([no_bn, plain_b], ("lr",))[1]] == \
        [{"no BN": "no_bn", "BN": "plain_b"}]


def test_legend_labels_are_the_swept_overrides_as_typed(tmp_path):
    """Labels from each configuration's .hydra/overrides.yaml: only the keys whose values differ, as typed
    (bn=false, experiment=bn_x5: bnexp's quotes and Hydra's + dropped), seeds and result-neutral keys left out."""
    from types import SimpleNamespace

    from bnexp.report.figstyle import typed_labels

    def group(key, *overrides, config=None):
        d = tmp_path / key
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
        return SimpleNamespace(key=key, runs=[SimpleNamespace(path=d)], config=config or {})

    a = group("a", "bn='false'", "lr=0.5", "seed=1", "trainer.max_steps=3000", "trainer.progress=false")
    b = group("b", "bn='true'", "lr=0.5", "seed=1", "trainer.max_steps=3000")
    c = group("c", "+experiment=bn_x5", "scale.base_lr=0.05", "seed=0")
    assert typed_labels([a, b]) == {"a": "bn=false", "b": "bn=true"}
    assert typed_labels([a, c]) == {"a": "bn=false lr=0.5 trainer.max_steps=3000",
                                    "c": "experiment=bn_x5 scale.base_lr=0.05"}
    assert typed_labels([a, group("d", "bn='false'", "lr=0.5", "seed=2", "trainer.max_steps=3000")]) == {}
    # the user's own quotes stay as typed; only the ones bnexp puts around bn's true/false go
    e, f = (group(k, "bn='false'", "seed=1", f"model.name={v}") for k, v in (("e", "'mlp'"), ("f", "cnn")))
    assert typed_labels([e, f]) == {"e": "model.name='mlp'", "f": "model.name=cnn"}
    # a budget ladder (the CIFAR-10 frontier): the run-length keys set from the budget are left out, the budget
    # stays; a run-length key that does not follow the budget stays too
    ladder = [group(f"{p}{b}", f"+experiment={p}", f"trainer.max_steps={b}", f"optim.decay_steps={b // 5}",
                    f"trainer.eval_every={b // 4}", "seed=0") for p in ("baseline", "bn_baseline") for b in (3000, 6000)]
    assert typed_labels(ladder) == {f"{p}{b}": f"experiment={p} trainer.max_steps={b}"
                                    for p in ("baseline", "bn_baseline") for b in (3000, 6000)}
    odd = group("odd", "+experiment=baseline", "trainer.max_steps=6000", "optim.decay_steps=600",
                "trainer.eval_every=1500", "seed=0")
    assert typed_labels(ladder + [odd])["odd"] == "experiment=baseline trainer.max_steps=6000 optim.decay_steps=600"
    # LayerNorm and GroupNorm by name, not as "bn=true bn.norm=layer"; BN and no BN then by name too
    norms = [group(k, *o, "lr=0.9", "seed=0", config={"bn.enabled": on, "bn.norm": norm}) for k, on, norm, o in (
        ("ln", True, "layer", ("bn='true'", "bn.norm=layer")), ("gn", True, "group", ("bn='true'", "bn.norm=group")),
        ("bn", True, "batch", ("bn='true'",)), ("no", False, "batch", ("bn='false'",)))]
    assert typed_labels(norms) == {"ln": "LayerNorm", "gn": "GroupNorm", "bn": "BN", "no": "no BN"}
    norms.append(group("ln2", "bn=layer", "lr=1.8", "seed=0", config={"bn.enabled": True, "bn.norm": "layer"}))
    assert typed_labels(norms)["ln2"] == "LayerNorm lr=1.8" and typed_labels(norms)["bn"] == "BN lr=0.9"


def test_stability_figure_units_hatches_and_legend_outside(mnist):
    report = build_report(mnist)
    fig = stability_figure(report)
    _check_axes_and_legend(fig)
    _title_close_to_the_panels(fig)
    ax = _visible(fig)[0]
    hatch = {c.get_label(): c.patches[0].get_hatch() for c in ax.containers}
    colour = {c.get_label(): c.patches[0].get_facecolor() for c in ax.containers}
    assert colour["no BN lr=0.5"] != colour["BN lr=0.5"] != colour["BN lr=0.12"]
    assert hatch["no BN lr=0.5"] == "//" and hatch["BN lr=0.5"] is None and hatch["noisy BN lr=0.5"] == ".."


def test_stability_figure_of_report_json_draws_the_bars_the_runs_give(mnist):
    """An archived sweep keeps only report.json: the figure drawn from it has the same bars, bar for bar, as the one
    drawn from the run folders (the numbers are report.json's per-configuration stability), in the same colours
    and hatches; a held-out sweep's figure (evaluation seeds only) is refused."""
    import json

    report = build_report(mnist)

    def bars(fig):
        return [[(c.get_label(), round(b.get_x(), 9), b.get_height(), b.get_facecolor(), b.get_hatch())
                 for c in ax.containers for b in c.patches] for ax in _visible(fig)]

    live, archived = stability_figure(report), stability_figure_of(json.loads(json.dumps(report.data)))
    assert bars(archived) == bars(live) and bars(live)[0]
    assert archived._suptitle.get_text() == live._suptitle.get_text()
    with pytest.raises(ValueError, match="held-out sweep"):
        stability_figure_of({**report.data, "tuning_seeds": [100, 101]})


@pytest.mark.slow  # renders figures (> 2.5 s of CPU)
def test_ics_figures_units_and_legend_outside(mnist):
    report = build_report(mnist)
    assert report.data["ics"]["figures"]
    for name in report.data["ics"]["figures"]:
        _check_axes_and_legend(ICS_PLOTS[name](report))


def test_ics_axis_labels_say_their_unit():
    assert axis_label("l2_rel") == "||G - G'|| / ||G|| (unitless)"
    assert axis_label("loss_variation") == "loss variation (nats)"
    assert axis_label("w1_first_unit").endswith("(pre-activation, a.u.)")
    with pytest.raises(KeyError, match="new_measure"):
        axis_label("new_measure")


def test_ics_figure_without_data_says_not_measured(cifar):
    report = build_report(cifar)
    fig = ics_figure(report, "gradient", [("l2", "x", lambda sweep, r: ([], []))], "t")
    assert [t.get_text() for t in fig.axes[0].texts] == ["not measured"] and len(fig.axes) == 1


def test_a_run_without_ics_jsonl_is_no_line_in_the_landscape_figure(tmp_path):
    """One BN run of an ICS sweep lost its ics.jsonl: its landscape series is empty (it ended the report in KeyError
    'step'), the other seed's is drawn."""
    from bnexp.report.figures_ics import layer_mean_series

    for variant in ("BN", "no BN"):
        for seed in (0, 1):
            make_ics_run(tmp_path, variant, 0.5, seed)
    (tmp_path / "BN,lr=0.5,seed=0" / "ics.jsonl").unlink()
    report = build_report(tmp_path)
    run = {r.path.name: r for r in report.sweep.runs}
    assert layer_mean_series(report.sweep, run["BN,lr=0.5,seed=0"], "land", "beta_smoothness") == ([], [])
    assert layer_mean_series(report.sweep, run["BN,lr=0.5,seed=1"], "land", "beta_smoothness")[0]


def test_cifar_figures_cite_sec_4_2_and_labels_name_the_variant(cifar):
    report = build_report(cifar)
    assert [legend_label(g) for g in report.groups] == ["baseline (no BN)", "bn_baseline (BN)"]
    for make in (accuracy_figure, percentiles_figure, stability_figure):
        fig = make(report)
        _check_axes_and_legend(fig)
        text = fig._suptitle.get_text()
        assert "CIFAR-10" in text and "Sec. 4.1, Fig. 1" not in text, text
    assert "Sec. 4.2" in accuracy_figure(report)._suptitle.get_text()
    md = (cifar / "report.md")
    from bnexp.report import render_markdown

    text = render_markdown(report.data)
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert not any("Sec. 4.1, Fig. 1a" in h or "Sec. 4.1, Fig. 1(a)" in h for h in heads), heads
    assert "## Stability of each layer's input (Sec. 4.1's Fig. 1(b, c) view, on CIFAR-10)" in heads, heads
    assert not md.exists()  # building the report writes nothing


def test_configurations_of_one_setting_and_family_get_a_shade_each():
    """Noisy BN at three noise scales shares BN's setting (they differ only in bn.* keys): each gets its
    own shade of green, while BN and no BN of one setting keep the same shade of their own family."""
    from matplotlib.colors import rgb_to_hsv

    from bnexp.report.figstyle import pyplot, styles
    from bnexp.report.groups import ConfigGroup
    from bnexp.analysis.runs import config_key

    configs = [{"bn.enabled": False, "lr": 0.1}, {"bn.enabled": True, "lr": 0.1}]
    configs += [{"bn.enabled": True, "bn.noise": True, "bn.noise_scale": s, "lr": 0.1} for s in (1.0, 10.0, 3.0)]
    groups = [ConfigGroup(key=config_key(c), config=c) for c in configs]
    st = styles(groups)
    noisy = [st[g.key].color for g in (groups[2], groups[4], groups[3])]  # noise scales 1, 3, 10
    assert len(set(noisy)) == 3
    assert all(max(c[:3]) == c[1] for c in noisy)  # all green
    values = [rgb_to_hsv(c[:3])[2] for c in noisy]
    assert values == sorted(values)  # darkest first, lighter with each larger noise scale (not in text order)
    # one configuration per family: the middle shade of each (not shifted by the noisy ones)
    plt = pyplot()
    assert st[groups[0].key].color == tuple(plt.get_cmap("Blues")(0.75))
    assert st[groups[1].key].color == tuple(plt.get_cmap("Oranges")(0.75))


def test_percentile_figure_splits_bn_by_place_when_the_sweep_places_it_both_ways():
    """The placement study (every run with BN, before or after the nonlinearity): a column per place, before
    and after of one setting on one row."""
    from bnexp.report.figures import figure_rows
    from bnexp.report.groups import ConfigGroup

    def g(key, position, act):
        return ConfigGroup(key, {"bn.enabled": True, "bn.position": position, "act": act, "lr": 0.5})

    columns, rows = figure_rows([g("b1", "before", "relu"), g("a1", "after", "relu"), g("a2", "after", "sigmoid"),
                                 g("b2", "before", "sigmoid")])
    assert columns == ["BN", "BN after g"]
    assert [{c: x.key for c, x in r.items()} for r in rows] == [{"BN": "b1", "BN after g": "a1"},
                                                                 {"BN after g": "a2", "BN": "b2"}]
    assert figure_rows([g("b1", "before", "relu"), g("b2", "before", "sigmoid")])[0] == ["BN"]  # one place


def test_at_most_keeps_each_ladders_top_rung_then_spreads_the_rest():
    from bnexp.report.figures import at_most
    from bnexp.report.groups import ConfigGroup

    ladder = [ConfigGroup(f"{p}{b}", {"experiment": p, "trainer.max_steps": b, "optim.decay_steps": b // 5})
              for p in ("baseline", "bn_baseline", "bn_x5") for b in (1500, 3000, 6000, 12000)]
    assert [g.key for g in at_most(ladder)] == ["baseline12000", "bn_baseline12000", "bn_x512000"]
    lrs = [ConfigGroup(f"lr{i}", {"lr": 0.1 * i}) for i in range(1, 16)]
    assert [g.key for g in at_most(lrs)] == ["lr1", "lr3", "lr5", "lr7", "lr9", "lr11", "lr13", "lr15"]
    assert at_most(lrs[:8]) == lrs[:8]


def test_at_most_shows_each_cifar_preset_at_its_top_rung_whatever_its_precision():
    """The CIFAR-10 plan-version-2 sweep: 7 presets' ladders whose rungs switch to bf16 from one on, plus the
    baseline's tuning grid (3 other (rate, dropout) settings at 6,000 steps): 10 configurations once the rungs are
    merged. The legend keeps every ladder at its top rung (the baseline's bf16 192k, not its last fp32 rung) and
    fills the one slot left with a tuning setting; the labels name the preset, not the keys it fixes."""
    from bnexp.report.figures import at_most, shown_labels
    from bnexp.report.groups import ConfigGroup

    def g(preset, b, lr=0.025, dropout=0.0, mult=1, act="relu"):
        precision = "bf16" if b >= 48000 or preset not in ("baseline", "bn_x5") else "fp32"
        return ConfigGroup(f"{preset},{lr},{dropout},{b}", {
            "experiment": preset, "scale.base_lr": lr, "lr": lr * mult, "model.dropout": dropout, "act": act,
            "bn": preset.startswith("bn"), "trainer.max_steps": b, "optim.decay_steps": b // 5,
            "trainer.precision": precision, "scale.precision": precision})

    ladders = ([g("baseline", b) for b in (3000, 6000, 12000, 24000, 48000, 96000, 192000)]
               + [g("bn_baseline", b) for b in (1500, 3000, 48000)] + [g("bn_x5", b, mult=5) for b in (375, 96000)]
               + [g("bn_x30", b, mult=30) for b in (375, 48000)]
               + [g("bn_x5_sigmoid", b, mult=5, act="sigmoid") for b in (375, 12000)]
               + [g("baseline_sigmoid", b, act="sigmoid") for b in (3000, 12000)]
               + [g("baseline_x5", b, mult=5) for b in (3000, 12000)])
    tuning = [g("baseline", 6000, 0.025, 0.3), g("baseline", 6000, 0.04, 0.0), g("baseline", 6000, 0.04, 0.3)]
    kept = at_most(ladders + tuning)
    assert [x.key for x in kept] == ["baseline,0.025,0.0,192000", "bn_baseline,0.025,0.0,48000",
                                     "bn_x5,0.025,0.0,96000", "bn_x30,0.025,0.0,48000", "bn_x5_sigmoid,0.025,0.0,12000",
                                     "baseline_sigmoid,0.025,0.0,12000", "baseline_x5,0.025,0.0,12000",
                                     "baseline,0.025,0.3,6000"]
    labels = shown_labels(kept)
    assert labels["bn_x5,0.025,0.0,96000"] == (
        "experiment=bn_x5 model.dropout=0 trainer.max_steps=96000 trainer.precision=bf16")
    assert "lr=" not in labels["baseline_x5,0.025,0.0,12000"] and "act=" not in labels["bn_x5_sigmoid,0.025,0.0,12000"]


def test_at_most_deals_the_slots_to_every_normalizer_family_in_turn():
    """The batch-size study's stage 2, one run per configuration: 12 BN (ghost BN among them), 7 LayerNorm and
    7 no-BN configurations at one budget each. The eight drawn are three, three and two, spread within each family
    (first and last included), in the order of the configurations; with eight slots for two families of two, all four."""
    from bnexp.report.figures import at_most
    from bnexp.report.groups import ConfigGroup

    def g(norm, m, lr, bn=True):
        return ConfigGroup(f"{norm},{m},{lr},{bn}", {"bn.enabled": bn, "bn.norm": norm, "trainer.batch_size": m,
                                                     "lr": lr, "trainer.max_steps": 240_000 // m})

    bn = [g("batch", m, lr) for m in (2, 4, 16, 60, 256) for lr in (0.1, 0.2)] + [g("batch", 60, 0.3), g("batch", 60, 0.4)]
    layer = [g("layer", m, 0.5) for m in (2, 4, 16, 60, 256)] + [g("layer", 2, 0.6), g("layer", 256, 0.6)]
    plain = [g("batch", m, 0.5, bn=False) for m in (2, 4, 16, 60, 256)] + [g("batch", 4, 0.6, bn=False),
                                                                           g("batch", 256, 0.6, bn=False)]
    every = bn + layer + plain
    kept = at_most(every)
    assert len(kept) == 8 and kept == [x for x in every if x in kept]  # the configurations' order
    assert [x for x in kept if x in bn] == [bn[0], bn[6], bn[11]]  # indices round(i * 11 / 2)
    assert [x for x in kept if x in layer] == [layer[0], layer[3], layer[6]]
    assert [x for x in kept if x in plain] == [plain[0], plain[6]]
    assert at_most(bn[:2] + plain[:2]) == bn[:2] + plain[:2]


@pytest.mark.slow  # renders a figure (> 2.5 s of CPU)
def test_stability_figure_names_at_most_eight_configurations(tmp_path):
    root = tmp_path / "many"
    for lr in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6):
        for bn in (True, False):
            make_run(root, f"bn={bn},lr={lr}", bn=bn, lr=lr, seed=0, knots=BN_05[0])
    fig = stability_figure(build_report(root))
    _check_axes_and_legend(fig)
    _title_close_to_the_panels(fig)
    assert len(fig.legends[0].get_texts()) == 8 and fig._suptitle.get_text() == (  # the title word for word
        "How far each layer's input distribution moved, first to last monitor step (Sec. 4.1, Fig. 1(b, c)); 8 of 12 "
        "configurations\n(the longest run of each; report.md lists all)")
    assert fig.get_size_inches()[1] * 100 <= 1000  # stability.png's dpi


# The batch-size study's stage 2 as its figure shows it (docs/studies/batch_size.md): (normalizer, m, lr, ghost
# batch) of 23 configurations, BN's 8 (two rates at m = 60 and ghost batches of 2 and 4), LayerNorm's 9 (two rates
# at m = 2, 4, 60 and 256), no BN's 6; each runs 24,000 / m steps (the study's fixed examples, scaled down), so
# the runs end between 93 and 12,000 steps.
BATCH_SIZE_STUDY = ([("batch", m, 0.01 * m, None) for m in (2, 4, 16, 60, 256)] + [("batch", 60, 0.9, None)]
                    + [("batch", 60, 0.9, 2), ("batch", 60, 1.8, 4)]
                    + [("layer", m, lr, None) for m, lr in ((2, 0.15), (2, 0.6), (4, 0.45), (4, 0.9), (16, 1.8),
                                                             (60, 3.6), (60, 5.4), (256, 1.8), (256, 3.6))]
                    + [("none", m, lr, None) for m, lr in ((2, 0.15), (4, 0.225), (4, 0.45), (16, 1.8), (60, 5.4),
                                                            (256, 3.6))])


def batch_size_study(root: Path, seeds=(0,)) -> Path:
    """A sweep shaped like the batch-size study (:data:`BATCH_SIZE_STUDY`): BN rises fastest to 97% except at
    m = 2 and with ghost batches of 2 (60%), LayerNorm to 96%, no BN slowest to 95.5%."""
    import yaml

    for norm, m, lr, ghost in BATCH_SIZE_STUDY:
        steps = 24_000 // m
        top = 0.6 if norm == "batch" and (m == 2 or ghost == 2) else {"batch": 0.97, "layer": 0.96, "none": 0.955}[norm]
        rise = {"batch": 0.15, "layer": 0.4, "none": 0.6}[norm]
        knots = [(0, 0.1), (int(0.3 * rise * steps), 0.5), (int(rise * steps), top - 0.02), (steps, top)]
        for seed in seeds:
            d = make_run(root, f"{norm},m={m},lr={lr},g={ghost},seed={seed}", bn=norm != "none", lr=lr, seed=seed,
                         max_steps=steps, every=max(1, steps // 20), knots=knots)
            cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
            cfg["bn"].update({"norm": "batch" if norm == "none" else norm, "ghost_batch_size": ghost})
            cfg["trainer"]["batch_size"] = m
            (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return root


def _title_within_the_panels(fig) -> None:
    """The suptitle is no wider than the panels (their tick and axis labels included)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [a.get_tightbbox(renderer) for a in _visible(fig)]
    title = fig._suptitle.get_window_extent(renderer)
    assert title.x0 >= min(b.x0 for b in boxes) - 2 and title.x1 <= max(b.x1 for b in boxes) + 2, \
        (title, fig._suptitle.get_text())


def _title_close_to_the_panels(fig, gap_in: float = 0.4) -> None:
    """No empty band between the suptitle and the panels under it: at most ``gap_in`` inches from the title's
    bottom to the top of the highest axes (its title included)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top = max(a.get_tightbbox(renderer).y1 for a in _visible(fig))
    title = fig._suptitle.get_window_extent(renderer)
    assert 0 <= title.y0 - top <= gap_in * fig.dpi, (title.y0 - top) / fig.dpi


@pytest.mark.slow  # renders a figure of 10 configurations (> 2.5 s of CPU)
def test_one_normalizer_of_more_configurations_than_a_legend_gets_one_column_under_its_title(tmp_path):
    """The inference-statistics study's stage 2 (BN only, 5 m x 2 momenta): one family column, as wide as a
    figure of panels (its title in a few lines, within the panels) and no empty band under the title."""
    import yaml

    from bnexp.report.figures import MIN_WIDTH_IN

    for m in (2, 4, 16, 60, 256):
        for momentum in (0.1, 0.01):
            steps = 24_000 // m
            d = make_run(tmp_path / "is", f"m={m},mom={momentum}", bn=True, lr=0.01 * m, seed=0, max_steps=steps,
                         every=max(1, steps // 20), knots=[(0, 0.1), (steps // 5, 0.9), (steps, 0.96)])
            cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
            cfg["trainer"]["batch_size"], cfg["bn"]["momentum"] = m, momentum
            (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    fig = accuracy_figure(build_report(tmp_path / "is"))
    assert [a.get_title() for a in _visible(fig)][0] == "BN: 8 of 10 configurations"
    assert fig.get_size_inches()[0] >= MIN_WIDTH_IN and fig._suptitle.get_text().count("\n") <= 5
    _check_axes_and_legend(fig)
    _title_within_the_panels(fig)
    _title_close_to_the_panels(fig)


def test_log_steps_from_two_decades_of_evaluated_steps():
    from bnexp.report.figures import log_steps

    # the first evaluated step's power of ten: MNIST's 250 to 30,000 steps (2.1 decades), a study's runs of 93
    # steps (every 4) and 12,000
    assert log_steps([list(range(0, 30_001, 250))]) == 100
    assert log_steps([[0, 4, 93], [0, 600, 12_000]]) == 1
    assert log_steps([[0, 500, 1000, 4000]]) is None  # 8x: linear
    assert log_steps([[0, 100, 9_999]]) is None and log_steps([[0, 100, 10_000]]) == 100
    assert log_steps([[0, 1000, 100_000]]) == 1000 and log_steps([[0, 999, 100_000]]) == 100
    assert log_steps([[0]]) is None and log_steps([]) is None


def test_wrap_title_keeps_a_reference_in_one_piece():
    from bnexp.report.figstyle import wrap_title

    text = ("A typical unit of the last hidden layer over training (Sec. 4.1, Fig. 1(b, c)); 2 of 4 settings "
            "(report.md lists all)")
    lines = wrap_title(text, 60).split("\n")
    assert any("(Sec. 4.1, Fig. 1(b, c))" in line for line in lines), lines
    assert " ".join(lines) == text and all(len(line) <= 60 for line in lines)
    assert wrap_title("one\ntwo three", 5).split("\n") == ["one", "two", "three"]  # its own breaks stay


@pytest.mark.slow  # renders figures of 23 configurations (> 2.5 s of CPU)
def test_figures_of_a_batch_size_study_one_column_per_normalizer(tmp_path):
    report = build_report(batch_size_study(tmp_path / "bs"))
    fig = accuracy_figure(report)
    _check_axes_and_legend(fig)
    _title_within_the_panels(fig)
    _title_close_to_the_panels(fig)
    assert fig.get_size_inches()[1] * 110 <= 1000  # accuracy_vs_steps.png's dpi
    top = [a for a in _visible(fig) if "zoom" not in a.get_title()]
    assert [a.get_title() for a in top] == ["no BN", "BN", "LayerNorm: 8 of 9 configurations"]
    assert all(a.get_xscale() == "symlog" for a in _visible(fig))  # 93 to 12,000 steps: a log axis
    assert len({a.get_xlim() for a in top}) == 1 and len({a.get_ylim() for a in top}) == 1  # the same axes
    legends = [[t.get_text() for t in leg.get_texts()] for leg in fig.legends]
    assert [len(x) for x in legends] == [6, 8, 8]  # one legend per column, at most 8 entries each
    # BN's column, in ramp order: m from 2 to 256 (ghost batches at m = 60), lr last; no key that is the same
    # throughout the column
    assert legends[1] == ["trainer.batch_size=2 lr=0.02 (n=1)", "trainer.batch_size=4 lr=0.04 (n=1)",
                          "trainer.batch_size=16 lr=0.16 (n=1)",
                          "trainer.batch_size=60 bn.ghost_batch_size=2 lr=0.9 (n=1)",
                          "trainer.batch_size=60 bn.ghost_batch_size=4 lr=1.8 (n=1)",
                          "trainer.batch_size=60 lr=0.6 (n=1)", "trainer.batch_size=60 lr=0.9 (n=1)",
                          "trainer.batch_size=256 lr=2.56 (n=1)"]
    bn = [ln for ln in top[1].get_lines() if ln.get_linewidth() == 2.0]
    assert [ln.get_linestyle() for ln in bn] == ["-", "-", "-", ":", ":", "-", "-", "-"]  # ghost BN dotted
    assert {ln.get_linestyle() for ln in top[0].get_lines() if ln.get_linewidth() == 2.0} == {"--"}  # no BN dashed
    colours = [ln.get_color()[:3] for ln in bn]
    assert all(c[0] > c[2] for c in colours)  # oranges
    luma = [0.299 * r + 0.587 * g + 0.114 * b for r, g, b in colours]  # Rec. 601 brightness
    assert all(x > y for x, y in zip(luma, luma[1:]))  # one ramp, light to dark
    # percentiles: each normalizer ran its own rates, so no setting has all three at one rate; the figure pairs
    # them across rates by m (first and last m), not two lone BN panels
    fig = percentiles_figure(report)
    _check_axes_and_legend(fig)
    _title_within_the_panels(fig)
    _title_close_to_the_panels(fig)
    assert fig.get_size_inches()[1] * 100 <= 1000
    titles = [a.get_title().replace("\n", " ") for a in _visible(fig)]
    assert len(titles) == 12 and "2 of 11 settings" in fig._suptitle.get_text()  # a second rate: a row of its own
    for row, m in zip((titles[:6], titles[6:]), (2, 256)):
        assert all(f"trainer.batch_size={m} " in t for t in row), row
        assert ["bn=false" in t for t in row[:3]] == [True, False, False] and "bn.norm=layer" in row[2]


@pytest.mark.slow  # renders figures (> 2.5 s of CPU)
def test_accuracy_figure_steps_axis_is_linear_within_two_decades(cifar):
    fig = accuracy_figure(build_report(cifar))  # 500 to 4,000 steps
    assert {a.get_xscale() for a in _visible(fig)} == {"linear"}
    assert not any("log axis" in a.get_xlabel() for a in _visible(fig))


@pytest.mark.slow  # renders a figure (> 2.5 s of CPU)
def test_percentile_figure_of_the_placement_study_pairs_before_and_after(tmp_path):
    """Every run with BN, before or after g, in two models and two nonlinearities: each shown setting has BN
    before and after side by side, the title wraps between words of the panels' width, not inside its paper
    reference, and the figure fits a screen."""
    import yaml

    root = tmp_path / "placement"
    for model in ("mlp", "cnn"):
        for act in ("sigmoid", "relu"):
            for pos in ("before", "after"):
                d = make_run(root, f"{model},{act},{pos}", bn=True, lr=0.5, seed=0, knots=BN_05[0], model=model)
                cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
                cfg["bn"]["position"], cfg["act"] = pos, act
                (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    fig = percentiles_figure(build_report(root))
    _check_axes_and_legend(fig)
    _title_within_the_panels(fig)
    _title_close_to_the_panels(fig)
    assert fig.get_size_inches()[1] * 100 <= 1000
    axes = _visible(fig)
    assert len(axes) == 8  # 2 of 4 settings, raw and relative, before and after
    for left, right in zip(axes[::2], axes[1::2]):
        assert "bn.position=before" in left.get_title() and "bn.position=after" in right.get_title()
        assert left.get_title().split("bn.position")[0] == right.get_title().split("bn.position")[0]
    assert "(Sec. 4.1, Fig. 1(b, c))" in fig._suptitle.get_text()
