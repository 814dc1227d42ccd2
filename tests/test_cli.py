"""End-to-end tests of `bnexp train` on the real MNIST data: outputs, TensorBoard tags,
multirun, config composition, and clear errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from bnexp.config.schema import compose_config, validate
from bnexp.nets.models import HiddenLayer, build_model
from bnexp.runfolders.rundir import read_jsonl

from conftest import FAST


def _event_tags(run_dir: Path) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"histograms": 0, "scalars": 0, "tensors": 0})
    ea.Reload()
    return {"tags": ea.Tags(), "hparams": ea.PluginTagToContent("hparams"), "ea": ea}


def test_train_end_to_end_on_real_mnist(bnexp_train, tmp_path):
    run_dir = tmp_path / "run"
    r, summary = bnexp_train(run_dir, "trainer.max_steps=300", "trainer.eval_every=100", "trainer.hist_every=100")
    for key in ("status", "step", "final_test_accuracy", "best_test_accuracy", "best_step", "steps_to_target",
                "wall_time_s", "steps_per_s", "bn", "act", "lr", "seed"):
        assert key in summary, key
    assert summary["status"] == "finished" and summary["step"] == 300
    assert summary["bn"] is True and summary["act"] == "sigmoid"
    # 300 SGD steps of the BN network on real MNIST learn far above chance (10%).
    assert summary["final_test_accuracy"] > 0.7
    assert set(summary["steps_to_target"]) == {"0.9", "0.95", "0.97", "0.98"}

    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 100, 200, 300]
    assert metrics[-1]["test_accuracy"] == summary["final_test_accuracy"]
    assert max(m["test_accuracy"] for m in metrics) == summary["best_test_accuracy"]
    assert metrics[0]["test_accuracy"] < 0.3  # untrained network is near chance
    # steps-to-target agrees with the evaluation history
    for t, step in summary["steps_to_target"].items():
        reached = [m["step"] for m in metrics if m["test_accuracy"] >= float(t)]
        assert step == (reached[0] if reached else None)

    shift = read_jsonl(run_dir / "shift.jsonl")
    assert [s["step"] for s in shift] == [0, 100, 200, 300]
    assert set(shift[0]["layers"]) == {"layer1", "layer2", "layer3"}
    assert shift[0]["unit"]["layer"] == "layer3"
    for rec in shift:
        for stats in list(rec["layers"].values()) + [rec["unit"]]:
            assert stats["p15"] <= stats["p50"] <= stats["p85"]

    events = list(run_dir.glob("events.out.tfevents.*"))
    assert len(events) == 1
    # hparams live in the run's own event file: no stray sub-run folder with events
    assert not [p for p in run_dir.rglob("events.out.tfevents.*") if p.parent != run_dir]
    tb = _event_tags(run_dir)
    scalars = set(tb["tags"]["scalars"])
    for tag in ("Train/loss", "Train/accuracy", "Test/loss", "Test/accuracy", "Train/learning_rate",
                "shift/typical_unit/p15", "shift/typical_unit/p50", "shift/typical_unit/p85",
                "hparams/final_test_accuracy"):
        assert tag in scalars, tag
    for layer in ("layer1", "layer2", "layer3"):
        assert f"preact/{layer}" in tb["tags"]["histograms"]
        for k in ("p15", "p50", "p85", "mean", "std"):
            assert f"shift/{layer}/{k}" in scalars
    assert "custom_scalars__config__" in tb["tags"]["tensors"]
    assert tb["hparams"], "hparams summaries missing from the run's event file"
    assert "shift/percentile_bands" in tb["tags"]["images"]
    acc_events = tb["ea"].Scalars("Test/accuracy")
    assert [e.step for e in acc_events] == [0, 100, 200, 300]
    assert abs(acc_events[-1].value - summary["final_test_accuracy"]) < 1e-6

    assert (run_dir / "percentiles.png").stat().st_size > 1000
    ckpt = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    assert ckpt["step"] == 300 and "model" in ckpt and "optimizer" in ckpt
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert "bnexp run: finished" in r.stdout  # the rich summary table


def test_cnn_and_recompute_population_stats(bnexp_train, tmp_path):
    run_dir = tmp_path / "cnn"
    _, s = bnexp_train(run_dir, "model=cnn", "act=relu", "lr=0.05", "bn.population_stats=recompute",
                       "bn.recompute_batches=20", "trainer.max_steps=60", "trainer.eval_every=30",
                       "trainer.hist_every=30")
    assert s["status"] == "finished" and s["model"] == "cnn" and s["act"] == "relu"
    assert s["population_stats"] == "recompute"
    assert "final_test_accuracy_ema" in s
    assert s["final_test_accuracy"] > 0.5
    shift = read_jsonl(run_dir / "shift.jsonl")
    assert set(shift[0]["layers"]) == {"layer1", "layer2", "layer3"}  # two conv layers and the fc layer


def test_multirun_two_jobs(run_bnexp, tmp_path):
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "bn=true,false", *FAST, "trainer.max_steps=100", "trainer.eval_every=50",
            "trainer.hist_every=50", f"hydra.sweep.dir={sweep}"]
    r = run_bnexp(*args)
    assert r.returncode == 0, r.stderr
    # run directories are named by the swept keys only (deterministic, so re-runs find them)
    dirs = sorted(p.parent.name for p in sweep.glob("*/summary.json"))
    assert dirs == ["bn=false", "bn=true"]
    for name, bn in zip(dirs, (False, True)):
        s = json.loads((sweep / name / "summary.json").read_text())
        assert s["status"] == "finished" and s["bn"] is bn
    # Re-running the same sweep skips the finished runs.
    before = {p: p.stat().st_mtime_ns for p in sweep.glob("*/summary.json")}
    r2 = run_bnexp(*args)
    assert r2.returncode == 0, r2.stderr
    assert {p: p.stat().st_mtime_ns for p in sweep.glob("*/summary.json")} == before
    assert "skipped" in r2.stdout + r2.stderr


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("bn", ["true", "false"])
@pytest.mark.parametrize("act", ["sigmoid", "relu"])
def test_config_composes_for_every_combination(model, bn, act):
    cfg = compose_config([f"model={model}", f"bn={bn}", f"act={act}"])
    validate(cfg)
    assert cfg.model.name == model and cfg.bn.enabled is (bn == "true") and cfg.act.value == act
    net = build_model(cfg, (1, 28, 28), 10)
    out = net(torch.rand(4, 1, 28, 28))
    assert out.shape == (4, 10)
    layers = [m for m in net.modules() if isinstance(m, HiddenLayer)]
    assert all((m.affine.bias is None) == (bn == "true") for m in layers)
    expected_act = torch.nn.Sigmoid if act == "sigmoid" else torch.nn.ReLU
    assert all(isinstance(m.act, expected_act) for m in layers)


def test_defaults_are_the_paper_fig1_setup():
    cfg = compose_config([])
    assert cfg.model.name == "mlp" and list(cfg.model.hidden) == [100, 100, 100]
    assert cfg.act.value == "sigmoid" and cfg.bn.enabled is True
    assert cfg.trainer.batch_size == 60 and cfg.trainer.max_steps == 50_000
    assert cfg.model.init_std is not None and cfg.model.init_std <= 0.05
    OmegaConf.to_yaml(cfg)


def test_help_lists_groups_and_options(run_bnexp):
    r = run_bnexp("--help")
    assert r.returncode == 0
    for text in ("bnexp train", "bnexp report", "model=cnn|mlp", "data=cifar10|mnist", "bn=true|false"):
        assert text in r.stdout
    r = run_bnexp("train", "--help")
    assert r.returncode == 0
    for text in ("Config groups", "model: cnn, mlp", "bn: false, group, layer, noisy, true", "max_steps", "batch_size", "probe_size",
                 "targets", "population_stats"):
        assert text in r.stdout, text
    # every key with its default and its one-line description from the schema's field metadata
    import dataclasses

    from bnexp.config.schema import TrainerConfig

    lines = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith("  ") and "=" in ln.split()[0]}
    for f in dataclasses.fields(TrainerConfig):
        line = lines[f"trainer.{f.name}={_as_written(f.default if f.default is not dataclasses.MISSING else f.default_factory())}"]
        assert f.metadata["help"] in line, f.name
    assert "data.augment=false" in lines and "'False'" not in r.stdout
    # the values of the groups chosen on the command line
    r = run_bnexp("train", "model=cnn", "+experiment=bn_x5", "--help")
    assert r.returncode == 0 and "  model.channels=[8,16,32] " in r.stdout and "  lr=0.125 " in r.stdout


@pytest.mark.parametrize("args", [("train", "--help"), ("--help",)])
def test_help_into_a_closed_pipe_ends_without_a_traceback(data_root, args):
    """``bnexp train --help | head -1``: the reader closes the pipe before bnexp has written everything (here:
    before its first write); bnexp ends with exit code 1 and nothing on stderr, as the recipe of Python's
    signal documentation ("Note on SIGPIPE") prescribes."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    exe = Path(sys.executable).with_name("bnexp")
    p = subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, BNEXP_DATA_ROOT=str(data_root)))
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=120) == 1 and err == ""


def _as_written(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


@pytest.mark.parametrize("override,needle", [
    ("act=tanhh", "act"),
    ("model=resnet", "model"),
    ("lr=abc", "lr"),
    ("lr=-1", "lr=-1"),
    ("trainer.batch_size=1", "trainer.batch_size=1"),
    ("trainer.max_steps=0", "trainer.max_steps"),
    ("trainer.device=tpu", "trainer.device"),
    ("monitor.percentiles=[0,50,100]", "monitor.percentiles"),
    ("trainer.probe_size=20000", "trainer.probe_size"),
])
def test_bad_input_exits_2_with_one_clear_message(bnexp_main, tmp_path, override, needle):
    code, err, out = bnexp_main("train", *FAST, "trainer.max_steps=5", override, f"hydra.run.dir={tmp_path / 'bad'}")
    assert code == 2, (out, err)
    assert needle in err
    assert "Traceback" not in err + out


def test_missing_dataset_names_files_and_fix(run_bnexp, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run_bnexp("train", *FAST, "trainer.max_steps=5", f"data.root={empty}", f"hydra.run.dir={tmp_path / 'r'}")
    assert r.returncode == 2
    assert "train-images-idx3-ubyte" in r.stderr and "BNEXP_DATA_ROOT" in r.stderr and "data.root" in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("MNIST not found") == 1  # printed once
    assert not (tmp_path / "r").exists()  # a refused run leaves no run folder (docs/reliability.md)


def test_unknown_command_and_report_of_missing_dir(run_bnexp, tmp_path):
    r = run_bnexp("trian")
    assert r.returncode == 2 and "unknown command" in r.stderr


def test_long_override_sets_get_short_unique_folder_names():
    from bnexp.runfolders.runnames import MAX_DIRNAME, safe_dirname as _safe_dirname

    a = "+experiment=bn_baseline,bn='true'," + ",".join(f"monitor.option_{i}=value_{i}" for i in range(20))
    b = a.replace("value_19", "value_X")
    na, nb = _safe_dirname(a), _safe_dirname(b)
    assert len(na) == MAX_DIRNAME and len(nb) == MAX_DIRNAME and na != nb
    assert na == _safe_dirname(a)  # deterministic: a re-run of the sweep finds the same folder
    assert "'" not in na and "/" not in _safe_dirname("data.root=/x/y")
    assert _safe_dirname("bn=true,lr=0.1") == "bn=true,lr=0.1"


def test_progress_bar_fits_80_columns_and_shows_no_nan_before_the_first_loss():
    """The bar keeps every field at 80 columns (rich cuts what does not fit with an ellipsis), up to 1,000,000
    steps; before the first logged loss it shows '-', never 'nan'."""
    import io
    import re

    from rich.console import Console

    from bnexp.train.progress import Progress

    def frames(updates):
        buf = io.StringIO()
        bar = Progress(True, 1_000_000, 0, console=Console(file=buf, width=80, force_terminal=True, color_system=None))
        for step, fields in updates:
            bar.update(step, **fields)
        bar.progress.refresh()
        bar.stop()
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
        return [f for f in re.split(r"[\r\n]", text) if f.strip()]

    first = frames([])
    assert first and all("nan" not in f.lower() for f in first)
    assert "loss -" in first[-1] and "test acc -" in first[-1]
    last = frames([(999_999, {"loss": 0.123456}), (999_999, {"acc": "0.9712"})])[-1]
    assert len(last) <= 80 and "…" not in last
    assert "999999/1000000" in last and "loss 0.1235" in last and last.rstrip().endswith("test acc 0.9712")


def test_a_parallel_jobs_progress_is_labelled_lines_one_per_tenth():
    """A job of a parallel sweep (another job writes to the same terminal) prints plain lines led by its run's
    name, at its start and once per tenth of its steps, instead of a live bar that the other job's overwrites."""
    import io

    from rich.console import Console

    from bnexp.train.progress import Progress

    buf = io.StringIO()
    bar = Progress(True, 1000, 0, console=Console(file=buf, width=80, color_system=None), label="bn=true,seed=1")
    for step in range(1, 1001):
        bar.update(step, **({"loss": 0.5} if step % 50 == 0 else {}), **({"acc": "0.9100"} if step == 500 else {}))
    bar.stop()
    lines = buf.getvalue().splitlines()
    assert len(lines) == 11 and all(line.startswith("bn=true,seed=1: step ") for line in lines)
    assert lines[0].startswith("bn=true,seed=1: step 0/1000 (0%), -/s, ETA -, loss -, test acc -")
    assert [line.split("step ")[1].split("/")[0] for line in lines] == [str(s) for s in range(0, 1001, 100)]
    assert "loss 0.5000, test acc 0.9100" in lines[-1] and "(100%)" in lines[-1]


def test_the_end_of_run_table_says_a_run_resumed(capsys):
    from bnexp.runfolders.sweepsummary import print_summary

    base = {"status": "finished", "model": "mlp", "bn": True, "act": "sigmoid", "lr": 0.5, "seed": 0, "step": 4000,
            "max_steps": 4000, "final_test_accuracy": 0.97, "best_test_accuracy": 0.97, "best_step": 4000,
            "wall_time_s": 60.5, "steps_per_s": 66.0, "run_dir": "outputs/runs/x"}
    print_summary({**base, "resumed_from_step": 1000})
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "resumed from the checkpoint of step 1,000" in out and "wall time (all sessions) 60.5 s" in out
    print_summary({**base, "resumed_from_step": None})
    assert "resumed" not in capsys.readouterr().out
