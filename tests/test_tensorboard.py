"""What TensorBoard shows, read back with TensorBoard's own event readers (issue 12).

One real 2-run sweep (bn=true,false, a few hundred steps on MNIST) is read with
``tensorboard.backend.event_processing.event_accumulator.EventAccumulator``: the sweep's
run-folder names, the Custom Scalars layout (order, relative bands per layer), the HParams
columns (types, count) and a value of every metric for every run, not-reached targets
included. Figure functions are checked for labelled axes on matplotlib objects.
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


def test_sweep_folders_are_named_by_the_swept_key_only(sweep):
    assert sorted(p.name for p in sweep.iterdir() if p.is_dir()) == ["bn=false", "bn=true"]


def test_hparams_columns_types_and_a_metric_value_for_every_run(sweep):
    from tensorboard.plugins.hparams import api_pb2, metadata

    from bnexp.tblog import MAX_COLUMNS

    for run, bn in (("bn=true", True), ("bn=false", False)):
        ea = _accumulator(sweep / run)
        ssi = metadata.parse_session_start_info_plugin_data(
            ea.SummaryMetadata(metadata.SESSION_START_INFO_TAG).plugin_data.content)
        hp = {k: getattr(v, v.WhichOneof("kind")) for k, v in ssi.hparams.items()}
        kinds = {k: v.WhichOneof("kind") for k, v in ssi.hparams.items()}
        assert len(hp) <= MAX_COLUMNS
        assert hp["bn"] is bn and kinds["bn"] == "bool_value"  # a boolean, not 0.0/1.0
        assert hp["act"] == "sigmoid" and hp["lr"] == 0.5 and hp["seed"] == 0 and hp["batch_size"] == 60
        assert {"model", "data", "experiment"} <= set(hp)
        exp = metadata.parse_experiment_plugin_data(ea.SummaryMetadata(metadata.EXPERIMENT_TAG).plugin_data.content)
        infos = {h.name: h for h in exp.hparam_infos}
        assert infos["bn"].type == api_pb2.DATA_TYPE_BOOL and infos["lr"].type == api_pb2.DATA_TYPE_FLOAT64
        # the dashboard shows the first 5 columns, "differs" first: bn, act, lr, seed are among them
        shown = sorted(infos.values(), key=lambda h: (not h.differs, h.name))[:5]
        assert {"bn", "act", "lr", "seed"} <= {h.name for h in shown}
        metrics = [m.name.tag for m in exp.metric_infos]
        assert "hparams/steps_to_0.98" in metrics and "hparams/final_test_accuracy" in metrics
        scalars = set(ea.Tags()["scalars"])
        for tag in metrics:  # every metric has a value: Parallel Coordinates and Scatter keep the run
            assert tag in scalars, (run, tag)
        # 98% is out of reach in 120 steps: written as max_steps + 1
        assert [e.value for e in ea.Scalars("hparams/steps_to_0.98")] == [MAX_STEPS + 1]


def test_custom_scalars_layout_order_and_relative_bands(sweep):
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    ea = _accumulator(sweep / "bn=false")
    layout = layout_pb2.Layout()
    layout.ParseFromString(ea.Tensors(metadata.CONFIG_SUMMARY_TAG)[0].tensor_proto.string_val[0])
    titles = [c.title for c in layout.category]
    # training first, then the layers input to output, the typical unit, the unitless ICS measures
    assert titles == ["training", "layer1: input to the nonlinearity g", "layer2: input to the nonlinearity g",
                      "layer3: input to the nonlinearity g", "typical unit 0 of layer3: input to the nonlinearity g",
                      "internal covariate shift (unitless)"]
    assert layout.category[0].chart[0].title == "test accuracy"
    scalars = set(ea.Tags()["scalars"])
    for cat in layout.category[1:5]:
        series = [c.margin.series[0] for c in cat.chart]
        assert [s.value.split("/")[0] for s in series] == ["shift_rel", "shift"]  # relative band, raw band
        for s in series:
            assert {s.value, s.lower, s.upper} <= scalars, cat.title  # no empty chart
    for chart in layout.category[5].chart:  # each ICS chart matches tags of this run
        assert any(re.search(chart.multiline.tag[0], t) for t in scalars), chart.title
    # relative bands: at the first record the band is (-0.5, 0.5) around 0 for every layer
    for layer in ("layer1", "layer2", "layer3"):
        lo, mid, hi = (ea.Scalars(f"shift_rel/{layer}/{k}")[0].value for k in ("p15", "p50", "p85"))
        assert mid == pytest.approx(0.0, abs=1e-6) and hi - lo == pytest.approx(1.0, rel=1e-5)


def test_grad_ics_scalars_leave_out_layer1_and_fill_the_layout(sweep):
    """Layer 1's gradient ICS is zero by definition: no scalars (no constant chart), but its
    ics.jsonl entry stays, marked trivial; layers 2..K have l2, l2_rel = l2 / ||G||, cos, and
    the layout's gradient charts are the ones of those tags."""
    import json

    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    ea = _accumulator(sweep / "bn=false")
    grad = sorted(t for t in ea.Tags()["scalars"] if t.startswith("grad_ics/"))
    assert grad == [f"grad_ics/{n}/{k}" for n in ("classifier", "layer2", "layer3") for k in ("cos", "l2", "l2_rel")]
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
    assert [[t for t in grad if re.search(p, t)] for p in patterns] == [["grad_ics/layer2/l2_rel"],
                                                                         ["grad_ics/layer3/l2_rel"]]


def test_relative_bands_by_hand():
    from bnexp.monitor import relative_bands

    first = {"p15": 1.0, "p50": 2.0, "p85": 5.0, "mean": 9.0, "std": 1.0}
    now = {"p15": 3.0, "p50": 6.0, "p85": 10.0, "mean": 0.0, "std": 0.0}
    assert relative_bands(first, now) == {"p15": 0.25, "p50": 1.0, "p85": 2.0}
    assert relative_bands({"p15": 1.0, "p50": 1.0, "p85": 1.0}, now) is None


def test_grad_ics_layout_skips_layer1_and_bn_input_charts_follow_each_layer():
    import torch

    from bnexp.config import compose_config
    from bnexp.models import build_model
    from bnexp.monitor import ShiftMonitor

    model = build_model(compose_config(["bn=true"]), in_shape=(1, 28, 28), num_classes=10)
    mon = ShiftMonitor(model, torch.zeros(4, 1, 28, 28), [15, 50, 85])
    layout = mon.custom_scalars_layout(grad_ics=True, bn_input=True)
    grad = [v[1][0] for k, v in layout["internal covariate shift (unitless)"].items() if "gradient" in k]
    assert len(grad) == 2  # layers 2 and 3: layer 1's gradient ICS is zero by definition
    assert not any(re.search(p, "grad_ics/layer1/l2_rel") for p in grad)
    assert re.search(grad[0], "grad_ics/layer2/l2_rel") and re.search(grad[1], "grad_ics/layer3/l2_rel")
    charts = list(layout["layer1: input to the nonlinearity g"].values())
    assert [c[1][0] for c in charts] == ["shift_rel/layer1/p50", "shift/layer1/p50", "bn_input/layer1/p50"]
    assert "BN input" not in str(mon.custom_scalars_layout(bn_input=False))


def test_percentile_figure_one_row_per_layer_with_labelled_axes():
    from bnexp.monitor import plot_percentile_bands

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
