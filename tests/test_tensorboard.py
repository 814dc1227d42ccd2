"""What TensorBoard shows, read back with TensorBoard's own event readers (docs/tensorboard.md).

One real 2-run sweep (bn=true,false, 120 steps on MNIST) is read with
``tensorboard.backend.event_processing.event_accumulator.EventAccumulator`` and through
TensorBoard's own HParams plugin backend (the JSON its dashboard gets): the sweep's
run-folder names (and no lock file left), the tag groups TensorBoard opens first, the
Custom Scalars layout (order, relative bands per layer), the HParams columns (types,
domains, which are shown) and a metric value exactly where a run has one
(unreached targets are blank). Figure functions are checked for labelled axes on
matplotlib objects.
"""

from __future__ import annotations

import re

import pytest

from conftest import FAST

pytest.importorskip("tensorboard")

MAX_STEPS = 120


def _accumulator(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"tensors": 0, "scalars": 0})
    ea.Reload()
    return ea


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, data_root):
    import os
    import subprocess
    import sys
    from pathlib import Path

    tmp = tmp_path_factory.mktemp("tb")
    exe = Path(sys.executable).with_name("bnexp")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bnexp.cli"]
    r = subprocess.run(cmd + ["train", "-m", "bn=true,false", "lr=0.5", *FAST, f"trainer.max_steps={MAX_STEPS}",
                              "trainer.eval_every=40", "trainer.hist_every=40", "monitor.grad_ics=true",
                              "monitor.grad_ics_every=40", f"hydra.sweep.dir={tmp / 's'}"],
                       cwd=tmp, env=dict(os.environ, BNEXP_DATA_ROOT=str(data_root)), capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp / "s"


def _plugin(logdir, route: str, body: dict) -> dict:
    """What TensorBoard's HParams plugin answers the dashboard (its own backend, JSON)."""
    import json

    from conftest import tensorboard_backend
    from tensorboard.plugins.hparams import hparams_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    _, ctx = tensorboard_backend(logdir)
    app = hparams_plugin.HParamsPlugin(ctx).get_plugin_apps()[route]
    r = Client(app, Response).post(route, data=json.dumps(body), content_type="application/json")
    assert r.status_code == 200, r.get_data(as_text=True)
    return json.loads(r.get_data(as_text=True))


def _session_groups(logdir, experiment: dict) -> dict:
    """{trial id: {"hparams": {...}, "metrics": {tag: value}}}, as the dashboard requests them."""
    body = {"experimentName": "", "startIndex": 0, "sliceSize": 100,
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
            "colParams": [{"hparam": h["name"]} for h in experiment["hparamInfos"]]
            + [{"metric": m["name"]} for m in experiment["metricInfos"]]}
    groups = _plugin(logdir, "/session_groups", body)["sessionGroups"]
    return {g["name"]: {"hparams": g["hparams"], "metrics": {m["name"]["tag"]: m["value"] for m in g["metricValues"]}}
            for g in groups}


def test_sweep_folders_are_named_by_the_swept_key_only_and_hold_no_lock(sweep):
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["bn=false", "bn=true"]
    assert not list(sweep.glob("*/.lock"))  # removed when each run ended


def test_hparams_values_keep_their_types_in_the_session(sweep):
    from tensorboard.plugins.hparams import metadata

    from bnexp.train.tblog import MAX_COLUMNS

    for run, bn in (("bn=true", True), ("bn=false", False)):
        ea = _accumulator(sweep / run)
        ssi = metadata.parse_session_start_info_plugin_data(
            ea.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content)
        kinds = {k: v.WhichOneof("kind") for k, v in ssi.hparams.items()}
        hp = {k: getattr(v, kinds[k]) for k, v in ssi.hparams.items()}
        assert len(hp) <= MAX_COLUMNS
        assert hp["bn"] is bn and kinds["bn"] == "bool_value"  # a boolean, not 0.0/1.0
        # integers as text: the dashboard prints numbers with 5 digits (seed 0 -> "0.0000")
        assert (hp["seed"], kinds["seed"]) == ("0", "string_value")
        assert (hp["batch_size"], kinds["batch_size"]) == ("60", "string_value")
        assert (hp["lr"], kinds["lr"]) == (0.5, "number_value")
        assert hp["act"] == "sigmoid" and {"model", "data", "experiment"} <= set(hp)


def test_hparams_dashboard_shows_the_swept_key_and_leaves_unreached_targets_blank(sweep):
    """Through TensorBoard's own HParams backend: the columns the dashboard shows, and a
    blank (no value) for every target a run did not reach, the others equal to summary.json."""
    import json

    exp = _plugin(sweep, "/experiment", {"experimentName": ""})
    assert [(h["name"], h["type"], h["domainDiscrete"], h["differs"]) for h in exp["hparamInfos"]] == [
        ("bn", "DATA_TYPE_BOOL", [False, True], True)]
    tags = [m["name"]["tag"] for m in exp["metricInfos"]]
    # one swept key: every metric is listed (the dashboard shows the first five): final, best, targets from
    # the highest
    assert tags == ["hparams/final_test_accuracy", "hparams/best_test_accuracy", "hparams/steps_to_0.98",
                    "hparams/steps_to_0.97", "hparams/steps_to_0.95", "hparams/steps_to_0.9"]
    assert exp["metricInfos"][2]["displayName"] == "steps to 0.98 test accuracy"
    groups = _session_groups(sweep, exp)
    assert sorted(groups) == ["bn=false", "bn=true"]
    unreached = 0
    for run, group in groups.items():
        summary = json.loads((sweep / run / "summary.json").read_text())
        assert group["hparams"]["bn"] is (run == "bn=true") and group["hparams"]["seed"] == "0"
        assert group["metrics"]["hparams/final_test_accuracy"] == pytest.approx(summary["final_test_accuracy"])
        for target, steps in summary["steps_to_target"].items():
            tag = f"hparams/steps_to_{target}"
            if steps is None:  # not reached: no value at all, so the table cell is blank
                unreached += 1
                assert tag not in group["metrics"], (run, tag)
                assert tag not in _accumulator(sweep / run).Tags()["scalars"]
            else:
                assert group["metrics"][tag] == steps
    assert unreached >= 2  # 98% is out of reach in 120 steps


def test_time_series_and_scalars_open_on_the_test_and_train_curves(sweep):
    """TensorBoard sorts tag groups (the text before the first "/") by character code and
    opens the first two: those must be Test and Train, for every kind of card."""
    for run in ("bn=true", "bn=false"):
        tags = _accumulator(sweep / run).Tags()
        groups = sorted({t.split("/", 1)[0] for kind in ("scalars", "histograms", "images") for t in tags[kind]})
        assert groups[:2] == ["Test", "Train"], groups
        assert all(g[0].islower() for g in groups[2:])  # nothing else sorts before them
        assert {"Test/accuracy", "Test/loss", "Train/loss", "Train/accuracy",
                "Train/learning_rate"} <= set(tags["scalars"])


def test_custom_scalars_layout_order_and_relative_bands(sweep):
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    ea = _accumulator(sweep / "bn=false")
    layout = layout_pb2.Layout()
    layout.ParseFromString(ea.Tensors(metadata.CONFIG_SUMMARY_TAG)[0].tensor_proto.string_val[0])
    titles = [c.title for c in layout.category]
    # the deepest layer's drift first (one chart per configuration; a sweep's aggregate runs put "over seeds"
    # before it), training, the typical unit, the layers from the deepest to the first, the unitless ICS measures
    glance = "each seed: layer3 input to g, relative to its start (one chart per configuration)"
    assert titles == [glance, "training", "typical unit 0 of layer3: input to the nonlinearity g",
                      "layer3: input to the nonlinearity g", "layer2: input to the nonlinearity g",
                      "layer1: input to the nonlinearity g", "internal covariate shift (unitless)"]
    assert [c.title.split(":")[0] for c in layout.category[0].chart] == ["without BN"]
    assert layout.category[1].chart[0].title == "test accuracy"
    scalars = set(ea.Tags()["scalars"])
    for chart in layout.category[1].chart:  # the training charts match the renamed Test/Train tags
        assert [t for t in scalars if re.search(chart.multiline.tag[0], t)], chart.title
    for cat in layout.category[2:6]:
        series = [c.margin.series[0] for c in cat.chart]
        assert [s.value.split("/")[0] for s in series] == ["shift_rel", "shift"]  # relative band, raw band
        for s in series:
            assert {s.value, s.lower, s.upper} <= scalars, cat.title  # no empty chart
    for chart in layout.category[6].chart:  # each ICS chart shows tags of this run
        if chart.HasField("margin"):
            assert {chart.margin.series[0].value, chart.margin.series[0].lower} <= scalars, chart.title
        else:
            assert any(re.search(chart.multiline.tag[0], t) for t in scalars), chart.title
    # the glance chart holds the deepest layer's relative band, under this configuration's name only
    g = layout.category[0].chart[0].margin.series[0]
    assert (g.value, g.lower, g.upper) == ("glance/without_BN/layer3/p50", "glance/without_BN/layer3/p15",
                                           "glance/without_BN/layer3/p85")
    assert [e.value for e in ea.Scalars(g.value)] == [e.value for e in ea.Scalars("shift_rel/layer3/p50")]
    assert not [t for t in scalars if t.startswith("glance/with_BN")]
    with_bn = _accumulator(sweep / "bn=true")
    assert "glance/with_BN/layer3/p50" in with_bn.Tags()["scalars"]
    # relative bands: at the first record the band is (-0.5, 0.5) around 0 for every layer
    for layer in ("layer1", "layer2", "layer3"):
        lo, mid, hi = (ea.Scalars(f"shift_rel/{layer}/{k}")[0].value for k in ("p15", "p50", "p85"))
        assert mid == pytest.approx(0.0, abs=1e-6) and hi - lo == pytest.approx(1.0, rel=1e-5)


def test_custom_scalars_of_a_bn_sweep_show_bn_and_no_bn_apart_on_the_first_screen(sweep):
    """What the dashboard serves for the sweep (TensorBoard merges the runs' layouts): its first category holds a
    'without BN' and a 'with BN' chart; each chart's series exist only in the runs of its configuration."""
    import json

    from tensorboard.plugins.custom_scalar import custom_scalars_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    from conftest import tensorboard_backend

    mux, ctx = tensorboard_backend(sweep)
    app = custom_scalars_plugin.CustomScalarsPlugin(ctx).get_plugin_apps()["/layout"]
    r = Client(app, Response).get("/layout")
    assert r.status_code == 200
    first = json.loads(r.get_data(as_text=True))["category"][0]
    assert first["title"].startswith("each seed: layer3")
    titles = [c["title"].split(":")[0] for c in first["chart"]]
    assert titles == ["without BN", "with BN"]
    for chart, run in zip(first["chart"], ("bn=false", "bn=true")):
        tag = chart["margin"]["series"][0]["value"]
        holders = [d.name for d in sweep.iterdir() if d.is_dir() and tag in _accumulator(d).Tags()["scalars"]]
        assert holders == [run], (tag, holders)


def test_grad_ics_scalars_leave_out_layer1_and_fill_the_layout(sweep):
    """Layer 1's gradient ICS is zero by definition: no scalars (no constant chart), but its
    ics.jsonl entry stays, marked trivial; layers 2..K have l2, l2_rel = l2 / ||G||, cos, and
    the layout's gradient charts are the ones of those tags."""
    import json

    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    ea = _accumulator(sweep / "bn=false")
    grad = sorted(t for t in ea.Tags()["scalars"] if t.startswith("grad_ics/"))
    assert grad == [f"grad_ics/{n}/{k}" for n in ("classifier", "layer2", "layer3")
                    for k in ("cos", "l2", "l2_rel", "l2_rel_per_move", "move_rel")]
    recs = [json.loads(line) for line in (sweep / "bn=false" / "ics.jsonl").read_text().splitlines()]
    recs = [r for r in recs if r["kind"] == "grad_ics"]
    assert [r["step"] for r in recs] == [40, 80, 120]
    assert all(r["layers"]["layer1"]["trivial"] is True and r["layers"]["layer1"]["l2"] == 0.0 for r in recs)
    last = recs[-1]["layers"]["layer2"]
    rel = [e.value for e in ea.Scalars("grad_ics/layer2/l2_rel")][-1]
    assert rel == pytest.approx(last["l2"] / last["g_norm"], rel=1e-5)
    layout = layout_pb2.Layout()
    layout.ParseFromString(ea.Tensors(metadata.CONFIG_SUMMARY_TAG)[0].tensor_proto.string_val[0])
    ics = [c for c in layout.category if c.title == "internal covariate shift (unitless)"][0]
    patterns = [c.multiline.tag[0] for c in ics.chart if "gradient" in c.title]
    assert [[t for t in grad if re.search(p, t)] for p in patterns] == [["grad_ics/layer3/l2_rel"],
                                                                         ["grad_ics/layer2/l2_rel"]]


def test_relative_bands_by_hand():
    from bnexp.train.monitor import relative_bands

    first = {"p15": 1.0, "p50": 2.0, "p85": 5.0, "mean": 9.0, "std": 1.0}
    now = {"p15": 3.0, "p50": 6.0, "p85": 10.0, "mean": 0.0, "std": 0.0}
    assert relative_bands(first, now) == {"p15": 0.25, "p50": 1.0, "p85": 2.0}
    assert relative_bands({"p15": 1.0, "p50": 1.0, "p85": 1.0}, now) is None


def test_grad_ics_layout_skips_layer1_and_bn_input_charts_follow_each_layer():
    import torch

    from bnexp.config.schema import compose_config
    from bnexp.nets.models import build_model
    from bnexp.train.monitor import ShiftMonitor

    model = build_model(compose_config(["bn=true"]), in_shape=(1, 28, 28), num_classes=10)
    mon = ShiftMonitor(model, torch.zeros(4, 1, 28, 28), [15, 50, 85])
    layout = mon.custom_scalars_layout(grad_ics=True, bn_input=True)
    grad = [v[1][0] for k, v in layout["internal covariate shift (unitless)"].items() if "gradient" in k]
    assert len(grad) == 2  # layers 2 and 3: layer 1's gradient ICS is zero by definition
    assert not any(re.search(p, "grad_ics/layer1/l2_rel") for p in grad)
    assert re.search(grad[0], "grad_ics/layer3/l2_rel") and re.search(grad[1], "grad_ics/layer2/l2_rel")
    charts = list(layout["layer1: input to the nonlinearity g"].values())
    assert [c[1][0] for c in charts] == ["shift_rel/layer1/p50", "shift/layer1/p50", "bn_input/layer1/p50"]
    assert "BN input" not in str(mon.custom_scalars_layout(bn_input=False))


def test_percentile_figure_one_row_per_layer_with_labelled_axes():
    from bnexp.train.percentile_figure import plot_percentile_bands

    def stats(x):
        return {"p15": x - 1, "p50": x, "p85": x + 1, "mean": x, "std": 1.0}

    history = [{"step": s, "layers": {f"layer{i}": stats(s * i) for i in (1, 2, 3)},
                "unit": {"layer": "layer3", "index": 0, **stats(s)}} for s in (0, 100, 200)]
    fig = plot_percentile_bands(history, [15, 50, 85], "t")
    axes = [a for a in fig.axes if a.axison]
    assert len(axes) == 4 and fig.get_size_inches()[1] > fig.get_size_inches()[0] * 0.6  # rows, not a strip
    assert all(a.get_ylabel() for a in axes) and axes[-1].get_xlabel() == "training step"
    assert [a.get_title().split(": ")[1] for a in axes] == ["layer1, all units", "layer2, all units",
                                                             "layer3, all units", "unit 0 of layer3"]


def _write_run(logdir, name: str, hp: dict, swept, values: dict) -> None:
    from torch.utils.tensorboard import SummaryWriter

    from bnexp.train.tblog import metric_names, write_hparams_end, write_hparams_start

    w = SummaryWriter(log_dir=str(logdir / name))
    write_hparams_start(w, hp, metric_names([0.98, 0.9, 0.95]), swept=swept)
    write_hparams_end(w, values, step=500, not_reached=501)
    w.close()


HP = {"bn": True, "act": "sigmoid", "lr": 0.1, "seed": 0, "model": "mlp", "data": "mnist",
      "experiment": "none", "batch_size": 60}


def test_sweep_values_name_the_columns_and_list_the_values():
    from bnexp.train.tblog import sweep_values

    assert sweep_values(["bn='true','false','noisy'", "seed=range(0,3)", "lr=0.1", "+experiment=a,b",
                         "hydra.launcher.n_jobs=2,3", "act=sigmoid,relu", "act=tanh", "x=interval(0,1)"]) == {
        "bn": ["true", "false", "noisy"], "bn.noise": ["False", "True"], "seed": ["0", "1", "2"],
        "experiment": ["a", "b"], "x": []}  # act: the last override wins and is no sweep
    assert sweep_values(["bn=true,false", "trainer.max_steps=900"]) == {"bn": ["True", "False"]}
    assert sweep_values([]) == {}


def test_shown_metrics_keep_the_table_within_six_columns():
    from bnexp.train.tblog import TABLE_COLUMNS, shown_metrics

    m = ["final", "s0.9", "s0.95", "s0.97", "s0.98", "best"]
    assert TABLE_COLUMNS == 6
    assert shown_metrics(m, 0) == m and shown_metrics(m, 1) == m  # the dashboard shows 5, offers the 6th
    assert shown_metrics(m, 2) == m[:4]
    assert shown_metrics(m, 4) == m[:2]
    assert shown_metrics(m, 5) == m[:1] and shown_metrics(m, 9) == m[:1]  # it shows at most 5 hparams


def test_swept_columns_get_domains_of_their_own_type(tmp_path):
    """Three runs of a seed x lr x act sweep: integer seeds as text in numeric order, the lr
    interval, string choices, bool bn; unreached and non-finite metrics are left out."""
    swept = {"seed": ["10", "2", "0"], "lr": ["0.3", "0.03"], "act": ["sigmoid", "relu"], "bn": ["true", "false"]}
    _write_run(tmp_path, "a", {**HP, "seed": 10, "lr": 0.3}, swept,
               {"hparams/final_test_accuracy": 0.97, "hparams/steps_to_0.9": 200, "hparams/steps_to_0.95": None,
                "hparams/steps_to_0.98": float("nan"), "hparams/best_test_accuracy": 0.975})
    _write_run(tmp_path, "b", {**HP, "bn": False, "act": "relu", "seed": 2, "lr": 0.03}, swept,
               {"hparams/final_test_accuracy": float("inf"), "hparams/steps_to_0.9": None})
    exp = _plugin(tmp_path, "/experiment", {"experimentName": ""})
    infos = {h["name"]: h for h in exp["hparamInfos"]}
    assert sorted(infos) == ["act", "bn", "lr", "seed"] and all(h["differs"] for h in infos.values())
    assert (infos["seed"]["type"], infos["seed"]["domainDiscrete"]) == ("DATA_TYPE_STRING", ["0", "2", "10"])
    assert (infos["lr"]["type"], infos["lr"]["domainInterval"]) == ("DATA_TYPE_FLOAT64",
                                                                     {"minValue": 0.03, "maxValue": 0.3})
    assert (infos["act"]["type"], infos["act"]["domainDiscrete"]) == ("DATA_TYPE_STRING", ["relu", "sigmoid"])
    assert (infos["bn"]["type"], infos["bn"]["domainDiscrete"]) == ("DATA_TYPE_BOOL", [False, True])
    # four hparams shown: two metrics fit (final and best accuracy)
    assert [m["name"]["tag"] for m in exp["metricInfos"]] == ["hparams/final_test_accuracy",
                                                              "hparams/best_test_accuracy"]
    groups = _session_groups(tmp_path, exp)
    assert groups["a"]["hparams"] == {"bn": True, "act": "sigmoid", "lr": 0.3, "seed": "10", "model": "mlp",
                                      "data": "mnist", "experiment": "none", "batch_size": "60"}
    assert groups["a"]["metrics"] == {"hparams/final_test_accuracy": pytest.approx(0.97),
                                      "hparams/best_test_accuracy": pytest.approx(0.975)}
    assert groups["b"]["metrics"] == {}  # an infinite accuracy and an unreached target: blank, not 501
    scalars = set(_accumulator(tmp_path / "a").Tags()["scalars"])
    assert scalars == {"hparams/final_test_accuracy", "hparams/steps_to_0.9", "hparams/best_test_accuracy"}


def test_single_run_shows_bn_act_lr_seed_and_a_domain_only_for_values_it_knows(tmp_path):
    _write_run(tmp_path, "one", HP, {}, {"hparams/final_test_accuracy": 0.5})
    exp = _plugin(tmp_path, "/experiment", {"experimentName": ""})
    infos = {h["name"]: h for h in exp["hparamInfos"]}
    assert sorted(infos) == ["act", "bn", "lr", "seed"] and not any(h["differs"] for h in infos.values())
    assert "domainDiscrete" not in infos["seed"] and "domainDiscrete" not in infos["act"]  # not swept: no list
    assert infos["seed"]["type"] == "DATA_TYPE_STRING" and infos["lr"]["type"] == "DATA_TYPE_FLOAT64"
    # a swept value list that does not hold this run's value gives no domain either
    _write_run(tmp_path / "x", "two", {**HP, "seed": 7}, {"seed": ["0", "1"]}, {})
    exp = _plugin(tmp_path / "x", "/experiment", {"experimentName": ""})
    assert [(h["name"], "domainDiscrete" in h) for h in exp["hparamInfos"]] == [("seed", False)]
