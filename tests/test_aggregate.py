"""Seeds as bands (docs/tensorboard.md, "over seeds"): the aggregate TensorBoard run of each configuration of a
sweep, read back with TensorBoard's own readers and plugins, against numpy/scipy on the runs' records; rewriting it
is idempotent; it is never taken for a run (report, seed advice, run discovery, HParams)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from test_report import make_run

pytest.importorskip("tensorboard")

STEPS = list(range(0, 1001, 100))


def _accumulator(run_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"tensors": 0, "scalars": 0})
    ea.Reload()
    return ea


def _scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    ea = _accumulator(run_dir)
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in sorted(ea.Tags()["scalars"])}


def _write_events(run_dir: Path, bn: bool, seed: int) -> None:
    """The run's own TensorBoard event file with an HParams session (the HParams plugin's API, as the trainer's
    bnexp.train.tblog writes it), without torch."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.plugins.hparams import summary_v2 as hp
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(run_dir))
    values = {"bn": bn, "seed": str(seed)}
    for summary in (hp.hparams_config_pb([hp.HParam("bn", hp.Discrete([False, True])),
                                          hp.HParam("seed", hp.Discrete(["0", "1", "2"]))],
                                         [hp.Metric("hparams/final_test_accuracy")]),
                    hp.hparams_pb(values, trial_id="")):
        w.add_event(event_pb2.Event(step=0, summary=summary))
    w.close()


@pytest.fixture
def sweep(tmp_path) -> Path:
    """bn=true,false x seeds 0-2 with random curves: no BN's seed 2 diverges at step 700 (its last record NaN,
    nothing after), BN's seed 1 has no record at step 300; every run has its own event file."""
    rng = np.random.default_rng(7)
    root = tmp_path / "sweep"
    for bn in (True, False):
        for seed in range(3):
            diverged = not bn and seed == 2
            d = make_run(root, f"bn={str(bn).lower()},seed={seed}", bn=bn, lr=0.5, seed=seed, max_steps=1000,
                         every=100, status="diverged" if diverged else "finished",
                         diverged_step=750 if diverged else None)
            recs = []
            for step in STEPS:
                if (bn and seed == 1 and step == 300) or (diverged and step > 700):
                    continue
                nan = diverged and step == 700
                recs.append({"step": step, "test_accuracy": float("nan") if nan else float(rng.uniform(0.1, 1)),
                             "test_loss": float("nan") if nan else float(rng.uniform(0, 2)),
                             "train_loss": None if step == 0 else float(rng.uniform(0, 2)),
                             "wall_time_s": step / 100})
            (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            summary = json.loads((d / "summary.json").read_text())
            summary["final_test_accuracy"] = next(r["test_accuracy"] for r in recs[::-1]
                                                  if math.isfinite(r["test_accuracy"]))
            del summary["steps_to_target"]
            (d / "summary.json").write_text(json.dumps(summary))
            shift = [{"step": s, "layers": {name: {"p15": m - h, "p50": m, "p85": m + h} for name in ("layer1", "layer2")}}
                     for s in (0, 500, 1000) if not (diverged and s > 700)
                     for m, h in [(float(rng.normal(0, 3 if not bn else 0.2)) if s else 0.5, 1.0 + 0.1 * seed)]]
            (d / "shift.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shift))
            _write_events(d, bn, seed)
    return root


def _records(run_dir: Path, key: str) -> dict[int, float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if isinstance(r.get(key), float) and math.isfinite(r[key]):
            out[r["step"]] = r[key]
    return out


def _drift(run_dir: Path) -> dict[int, float]:
    """By hand: layer2 (the deepest) median's move from its first value, in first 15-85 spreads."""
    recs = [json.loads(line) for line in (run_dir / "shift.jsonl").read_text().splitlines()]
    f = recs[0]["layers"]["layer2"]
    return {r["step"]: (r["layers"]["layer2"]["p50"] - f["p50"]) / (f["p85"] - f["p15"]) for r in recs}


def test_aggregate_mean_and_band_equal_numpy_and_scipy_on_the_records(sweep):
    from bnexp.report.aggregate import CATEGORY, write_sweep_aggregates

    written = write_sweep_aggregates(sweep)
    assert sorted(p.parent.name for p in written) == ["bn=false", "bn=true"]
    for config in ("bn=true", "bn=false"):
        runs = [sweep / f"{config},seed={s}" for s in range(3)]
        got = _scalars(sweep / "aggregate" / config)
        for q in ("test_accuracy", "test_loss", "train_loss", "drift"):
            per = [_drift(r) if q == "drift" else _records(r, q) for r in runs]
            steps = sorted(set().union(*per))
            mean = dict(got[f"over_seeds/{q}/mean"])
            low, high = dict(got[f"over_seeds/{q}/low"]), dict(got[f"over_seeds/{q}/high"])
            seeds = dict(got[f"over_seeds/{q}/seeds"])
            assert sorted(mean) == steps, (config, q)
            for step in steps:
                x = np.array([p[step] for p in per if step in p])
                assert seeds[step] == len(x)
                assert mean[step] == pytest.approx(x.mean(), rel=1e-6, abs=1e-6)  # float32 in the event file
                lo, hi = sps.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=sps.sem(x)) if np.ptp(x) else (
                    x.mean(), x.mean())  # the drift at its first record: 0 for every seed, a band of width 0
                assert low[step] == pytest.approx(lo, rel=1e-5, abs=1e-6)
                assert high[step] == pytest.approx(hi, rel=1e-5, abs=1e-6)
    # a missing record and a diverged run are left out of their steps: the band says over how many seeds
    assert dict(_scalars(sweep / "aggregate" / "bn=true")["over_seeds/test_accuracy/seeds"])[300] == 2
    no_bn = dict(_scalars(sweep / "aggregate" / "bn=false")["over_seeds/test_accuracy/seeds"])
    assert no_bn[600] == 3 and no_bn[700] == 2 and no_bn[1000] == 2
    assert _drift(sweep / "bn=false,seed=0")[500] != 0  # the drift check is not about zeros
    # its layout: the one category, a margin chart per quantity over the same tags in every aggregate run
    from tensorboard.plugins.custom_scalar import layout_pb2, metadata

    layout = layout_pb2.Layout()
    ea = _accumulator(sweep / "aggregate" / "bn=true")
    layout.ParseFromString(ea.Tensors(metadata.CONFIG_SUMMARY_TAG)[0].tensor_proto.string_val[0])
    assert [c.title for c in layout.category] == [CATEGORY]
    margins = [c.margin.series[0] for c in layout.category[0].chart if c.HasField("margin")]
    assert [(s.value, s.lower, s.upper) for s in margins] == [  # TensorBoard draws them last to first
        (f"over_seeds/{q}/mean", f"over_seeds/{q}/low", f"over_seeds/{q}/high")
        for q in ("train_loss", "test_loss", "test_accuracy", "drift")]


def test_a_second_report_leaves_the_same_event_data(sweep):
    from bnexp.report.command import report_main

    assert report_main([str(sweep)]) == 0
    first = {d.name: _scalars(d) for d in (sweep / "aggregate").iterdir()}
    assert report_main([str(sweep)]) == 0
    again = {d.name: _scalars(d) for d in (sweep / "aggregate").iterdir()}
    assert again == first and set(first) == {"bn=true", "bn=false"}
    assert all(len(list(d.glob("events.out.tfevents.*"))) == 1 for d in (sweep / "aggregate").iterdir())
    assert not list(sweep.glob(".aggregate*"))  # no temporary folder left


def test_a_sweep_holding_an_aggregate_counts_the_same_runs(sweep, capsys):
    from bnexp.report import build_report
    from bnexp.report.aggregate import write_sweep_aggregates
    from bnexp.runfolders.rundir import find_run_dirs

    before = build_report(sweep)
    write_sweep_aggregates(sweep)
    # even an aggregate folder that looks like a run (a copied summary.json) is never one
    stray = sweep / "aggregate" / "bn=true"
    (stray / "summary.json").write_text((sweep / "bn=true,seed=0" / "summary.json").read_text())
    after = build_report(sweep)
    assert after.data["runs"] == before.data["runs"] == 6
    assert [r.path for r in after.sweep.runs] == [r.path for r in before.sweep.runs]
    assert after.data["seed_advice"] == before.data["seed_advice"]
    assert not any("aggregate" in str(p) for p in find_run_dirs(sweep))


def test_tensorboard_shows_over_seeds_first_and_hparams_lists_runs_only(sweep):
    """Through TensorBoard's own plugin backends: the merged Custom Scalars layout opens on "over seeds", whose
    charts hold both aggregate runs; the HParams dashboard's sessions are the six runs; the aggregate runs lead
    the run list (so they take TensorBoard's first colours), BN first."""
    from tensorboard.plugins.core import core_plugin
    from tensorboard.plugins.custom_scalar import custom_scalars_plugin
    from tensorboard.plugins.hparams import hparams_plugin
    from werkzeug.test import Client
    from werkzeug.wrappers import Response

    from bnexp.report.aggregate import CATEGORY, write_sweep_aggregates

    write_sweep_aggregates(sweep)
    from conftest import tensorboard_backend

    mux, ctx = tensorboard_backend(sweep)
    app = custom_scalars_plugin.CustomScalarsPlugin(ctx).get_plugin_apps()["/layout"]
    first = json.loads(Client(app, Response).get("/layout").get_data(as_text=True))["category"][0]
    assert first["title"] == CATEGORY
    tag = first["chart"][-1]["margin"]["series"][0]["value"]
    assert tag == "over_seeds/drift/mean"  # drawn first: TensorBoard draws a category's margin charts last to first
    assert sorted(r for r in mux.Runs() if tag in mux.Runs()[r].get("tensors", [])) == [
        "aggregate/bn=false", "aggregate/bn=true"]
    runs = json.loads(Client(core_plugin.CorePlugin(ctx).get_plugin_apps()["/data/runs"], Response).get("/data/runs")
                      .get_data(as_text=True))
    assert runs[:2] == ["aggregate/bn=true", "aggregate/bn=false"] and len(runs) == 8
    hp = hparams_plugin.HParamsPlugin(ctx).get_plugin_apps()
    exp = json.loads(Client(hp["/experiment"], Response).post(
        "/experiment", data=json.dumps({"experimentName": ""}), content_type="application/json").get_data(as_text=True))
    body = {"experimentName": "", "startIndex": 0, "sliceSize": 100,
            "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
            "colParams": [{"hparam": h["name"]} for h in exp["hparamInfos"]]}
    groups = json.loads(Client(hp["/session_groups"], Response).post(
        "/session_groups", data=json.dumps(body), content_type="application/json").get_data(as_text=True))
    assert sorted(g["name"] for g in groups["sessionGroups"]) == sorted(
        f"bn={b},seed={s}" for b in ("true", "false") for s in range(3))


def test_no_aggregate_without_tensorboard_runs_or_a_second_seed(tmp_path):
    from bnexp.report.aggregate import write_sweep_aggregates

    root = tmp_path / "s"
    for seed in (0, 1):
        make_run(root, f"bn=true,seed={seed}", bn=True, lr=0.5, seed=seed)
    make_run(root, "bn=false,seed=0", bn=False, lr=0.5, seed=0)
    assert write_sweep_aggregates(root) == [] and not (root / "aggregate").exists()  # logger=csv: no TensorBoard
    _write_events(root / "bn=false,seed=0", False, 0)
    assert [p.parent.name for p in write_sweep_aggregates(root)] == ["bn=true"]  # bn=false has one seed


def test_the_accuracy_figure_draws_the_aggregate_band(sweep):
    """The report's accuracy figure shades the same band as TensorBoard's aggregate run."""
    from bnexp.report import build_report
    from bnexp.report.figures import accuracy_figure

    from bnexp.report.aggregate import write_sweep_aggregates

    write_sweep_aggregates(sweep)
    fig = accuracy_figure(build_report(sweep))
    ax = fig.axes[0]
    bands = [c for c in ax.collections if c.get_paths()]
    assert len(bands) == 2
    tb = {name: _scalars(sweep / "aggregate" / name) for name in ("bn=true", "bn=false")}
    drawn = sorted(np.nanmax(p.vertices[:, 1]) for c in bands for p in c.get_paths()[:1])
    want = sorted(100 * max(v for _, v in t["over_seeds/test_accuracy/high"]) for t in tb.values())
    assert drawn == pytest.approx(want, rel=1e-5)


def test_the_sweep_end_writes_the_aggregate(sweep):
    """The Hydra callback conf/config.yaml registers (called at a multirun's end) writes the aggregate runs."""
    import yaml
    from omegaconf import OmegaConf

    from bnexp.report.aggregate import AggregateRuns

    conf = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf" / "config.yaml").read_text())
    assert conf["hydra"]["callbacks"]["aggregate_runs"]["_target_"] == "bnexp.report.aggregate.AggregateRuns"
    AggregateRuns().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    assert sorted(p.name for p in (sweep / "aggregate").iterdir()) == ["bn=false", "bn=true"]


def test_merged_layouts_keep_every_runs_charts_of_a_category():
    """TensorBoard merges a later run's charts only into the first run's categories; the aggregate carries the full
    merge: a category first seen in the second layout keeps the third layout's chart too, each chart once."""
    from tensorboard.plugins.custom_scalar import layout_pb2

    from bnexp.report.aggregate import merged_layouts

    def lay(*cats):
        return layout_pb2.Layout(category=[layout_pb2.Category(title=t, chart=[layout_pb2.Chart(title=c) for c in cs])
                                           for t, cs in cats])

    out = merged_layouts([lay(("a", ["1"])), lay(("b", ["without BN"]), ("a", ["1", "2"])),
                          lay(("b", ["with BN"]), ("c", ["3"]))])
    assert [(c.title, [ch.title for ch in c.chart]) for c in out] == [
        ("a", ["1", "2"]), ("b", ["without BN", "with BN"]), ("c", ["3"])]


def test_run_order_alternates_bn_and_no_bn_and_names_drop_the_seed(tmp_path):
    from bnexp.analysis.runs import load_sweep
    from bnexp.report.aggregate import aggregate_names, run_order
    from bnexp.report.groups import group_runs
    from bnexp.runfolders.rundir import find_run_dirs

    root = tmp_path / "s"
    for lr in (0.1, 0.5):
        for bn in (False, True):
            make_run(root, f"bn={str(bn).lower()},lr={lr},seed=0", bn=bn, lr=lr, seed=0)
    groups = group_runs(load_sweep(find_run_dirs(root)).runs)
    names = aggregate_names(groups)
    order = [names[g.key] for g in run_order(groups)]
    assert [n.split(",")[0] for n in order] == ["bn=true", "bn=false", "bn=true", "bn=false"]
    assert sorted(order) == ["bn=false,lr=0.1", "bn=false,lr=0.5", "bn=true,lr=0.1", "bn=true,lr=0.5"]
