"""Tests of `bnexp report` on synthetic run directories with known metrics (no training).

Every expected number is computed by hand (or with numpy's population std, ddof=0,
the convention the report documents) from the accuracy curves written below.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from bnexp import report as rep
from bnexp.report import build_report, report_main

TARGETS = [0.95, 0.97, 0.98]
MAX_STEPS = 20_000
EVAL_EVERY = 100


# ----------------------------------------------------------------------- builders


def _config(bn: bool, lr: float, seed: int, max_steps: int, experiment: str | None = None,
            model: str = "mlp", data: str = "mnist", eval_every: int = EVAL_EVERY) -> dict:
    """A composed config like Hydra's .hydra/config.yaml; ignored keys differ per seed on purpose."""
    cfg = {
        "model": {"name": model, "hidden": [100, 100, 100], "init_std": 0.01, "dropout": 0.0},
        "data": {"name": data, "root": f"/data/copy{seed}", "download": bool(seed % 2), "verify_checksums": True,
                 "scaling": "unit", "augment": False},
        "optim": {"name": "sgd", "momentum": 0.0, "nesterov": False, "weight_decay": 0.0, "schedule": "constant",
                  "decay_rate": 1.0, "decay_steps": 1000},
        "bn": {"enabled": bn, "population_stats": "ema", "recompute_batches": 100, "momentum": 0.1, "eps": 1e-5,
               "impl": "torch"},
        "act": "sigmoid", "lr": lr, "seed": seed,
        "trainer": {"max_steps": max_steps, "batch_size": 60, "eval_every": eval_every, "hist_every": 1000,
                    "log_every": 50, "probe_size": 1000, "targets": TARGETS,
                    "device": ["auto", "cpu", "cuda"][seed % 3], "num_threads": seed, "progress": seed == 0,
                    "save_checkpoint": seed != 1},
        "monitor": {"percentiles": [15.0, 50.0, 85.0], "unit": 0, "histograms": True, "max_values": 200000},
        "hydra": {"run": {"dir": f"/somewhere/{seed}"}},
    }
    if experiment:
        cfg["experiment"] = experiment
    return cfg


def _curve(knots: list[tuple[int, float]], last_step: int, every: int) -> list[dict]:
    """metrics.jsonl records every `every` steps up to `last_step`; the accuracy at a step is the
    accuracy of the latest knot at or before it (a step function through the knots)."""
    recs = []
    for step in range(0, last_step + 1, every):
        acc = max(a for s, a in knots if s <= step)
        recs.append({"step": step, "epoch": step // 1000, "test_loss": 1.0 - acc, "test_accuracy": acc,
                     "train_loss": None if step == 0 else 1.0 - acc, "train_accuracy": None if step == 0 else acc,
                     "lr": 0.5, "wall_time_s": step / 1000})
    return recs


def _shift(bn: bool, seed: int, last_step: int) -> list[dict]:
    """shift.jsonl records every 1000 steps. BN: median 0 and spread 2 throughout. No BN: the median
    drifts linearly to 0.3 + 0.1 * seed and the 15-85 spread grows from 2 to 3."""
    recs = []
    for step in range(0, last_step + 1, 1000):
        f = step / last_step if last_step else 0.0
        med = 0.0 if bn else f * (0.3 + 0.1 * seed)
        half = 1.0 if bn else 1.0 + 0.5 * f
        stats = {"p15": med - half, "p50": med, "p85": med + half, "mean": med, "std": half}
        recs.append({"step": step, "layers": {f"layer{i}": dict(stats) for i in (1, 2, 3)},
                     "unit": {"layer": "layer3", "index": 0, **stats}})
    return recs


def _write_jsonl(path: Path, recs: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def make_run(root: Path, name: str, *, bn: bool, lr: float, seed: int, knots=None, max_steps: int = MAX_STEPS,
             status: str = "finished", diverged_step: int | None = None, experiment: str | None = None,
             with_config: bool = True, with_steps_to_target: bool = True, every: int = EVAL_EVERY,
             model: str = "mlp", data: str = "mnist", targets=TARGETS) -> Path:
    """Write one run directory like the trainer does: .hydra/config.yaml, metrics.jsonl,
    shift.jsonl and summary.json."""
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    if with_config:
        (d / ".hydra" / "config.yaml").write_text(
            yaml.safe_dump(_config(bn, lr, seed, max_steps, experiment, model, data, every), sort_keys=False))
    last = (diverged_step - 1) // every * every if diverged_step else max_steps
    metrics = _curve(knots or [(0, 0.1)], last, every)
    _write_jsonl(d / "metrics.jsonl", metrics)
    _write_jsonl(d / "shift.jsonl", _shift(bn, seed, last))
    accs = [r["test_accuracy"] for r in metrics]
    best = int(np.argmax(accs))
    summary = {
        "status": status, "step": diverged_step or max_steps, "max_steps": max_steps, "bn": bn, "act": "sigmoid",
        "lr": lr, "seed": seed, "model": model, "data": data, "batch_size": 60,
        "final_test_accuracy": accs[-1], "best_test_accuracy": accs[best], "best_step": metrics[best]["step"],
        "targets": targets, "diverged_step": diverged_step, "wall_time_s": 10.0, "steps_per_s": 1000.0,
        "experiment": experiment, "error": None,
    }
    if with_steps_to_target:
        summary["steps_to_target"] = {
            f"{t:g}": next((r["step"] for r in metrics if r["test_accuracy"] >= t), None) for t in targets}
    (d / "summary.json").write_text(json.dumps(summary))
    return d


# Accuracy curves of the MNIST-style sweep (Fig. 1a): step -> test accuracy knots.
BN_05 = {  # reaches 95% at 1000/1200/1400, 97% at 1500/1800/2100, 98% at 2000/2500/3000
    0: [(0, 0.1), (1000, 0.95), (1500, 0.97), (2000, 0.98), (5000, 0.985)],
    1: [(0, 0.1), (1200, 0.95), (1800, 0.97), (2500, 0.98), (6000, 0.986)],
    2: [(0, 0.1), (1400, 0.95), (2100, 0.97), (3000, 0.98), (7000, 0.987)],
}
NOBN_05 = {  # 95% at 10000/12000/14000; 97% at 15000/18000/never; 98% never
    0: [(0, 0.1), (10000, 0.95), (15000, 0.97), (19000, 0.975)],
    1: [(0, 0.1), (12000, 0.95), (18000, 0.97), (19500, 0.972)],
    2: [(0, 0.1), (14000, 0.95), (19900, 0.96)],
}
BN_5 = [(0, 0.1), (500, 0.95), (1000, 0.97), (1500, 0.975)]


@pytest.fixture
def sweep(tmp_path) -> Path:
    """bn=true,false x lr=0.5,5 x seeds 0-2, plus a failed run at each lr=5 setting:
    at lr=5 no BN diverges in seeds 0 and 1, and seed 2 failed (only a partial summary)."""
    root = tmp_path / "sweep"
    for seed in range(3):
        make_run(root, f"bn=true,lr=0.5,seed={seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed],
                 with_steps_to_target=seed != 2)  # seed 2: steps recomputed from metrics.jsonl
        make_run(root, f"bn=false,lr=0.5,seed={seed}", bn=False, lr=0.5, seed=seed, knots=NOBN_05[seed])
        make_run(root, f"bn=true,lr=5,seed={seed}", bn=True, lr=5.0, seed=seed, knots=BN_5)
    for seed in (0, 1):
        make_run(root, f"bn=false,lr=5,seed={seed}", bn=False, lr=5.0, seed=seed,
                 knots=[(0, 0.1), (100, 0.2), (200, 0.1)], status="diverged", diverged_step=300)
    # A failed run: config and a partial summary only (as cli._record_failure writes it).
    failed = root / "bn=false,lr=5,seed=2"
    (failed / ".hydra").mkdir(parents=True)
    (failed / ".hydra" / "config.yaml").write_text(yaml.safe_dump(_config(False, 5.0, 2, MAX_STEPS)))
    (failed / "summary.json").write_text(json.dumps({"status": "failed", "error": "RuntimeError: boom",
                                                     "traceback": "...", "lr": 5.0, "seed": 2}))
    # A run that never wrote summary.json nor metrics (killed at start): counted as failed.
    lost = root / "bn=true,lr=5,seed=3"
    (lost / ".hydra").mkdir(parents=True)
    (lost / ".hydra" / "config.yaml").write_text(yaml.safe_dump(_config(True, 5.0, 3, MAX_STEPS)))
    return root


def _conf(report, label: str) -> dict:
    return next(c for c in report.data["configurations"] if c["label"] == label)


# ------------------------------------------------------------------------- tests


def test_grouping_ignores_seed_and_non_experiment_keys(sweep):
    report = build_report(sweep)
    labels = [c["label"] for c in report.data["configurations"]]
    assert labels == ["bn=true lr=0.5", "bn=false lr=0.5", "bn=true lr=5", "bn=false lr=5"]
    assert report.data["varying_keys"] == ["bn.enabled", "lr"]
    runs = {c["label"]: (c["runs"], c["completed"]) for c in report.data["configurations"]}
    assert runs == {"bn=true lr=0.5": (3, 3), "bn=false lr=0.5": (3, 3), "bn=true lr=5": (4, 3),
                    "bn=false lr=5": (3, 2)}
    for c in report.data["configurations"]:
        assert "seed" not in c["config"] and "data.root" not in c["config"]
        assert not any(k.startswith("hydra") for k in c["config"])
        assert "trainer.device" not in c["config"] and "trainer.num_threads" not in c["config"]


def test_steps_to_target_mean_std_and_not_reached(sweep):
    report = build_report(sweep)
    bn, nobn = _conf(report, "bn=true lr=0.5"), _conf(report, "bn=false lr=0.5")
    s95 = bn["steps_to_target"]["0.95"]
    assert s95["per_seed"] == [1000, 1200, 1400]  # seed 2 recomputed from metrics.jsonl
    assert s95["mean"] == pytest.approx(1200.0)
    assert s95["std"] == pytest.approx(np.std([1000, 1200, 1400]))  # population std: 163.3
    assert s95["text"] == "1,200 ± 163"
    assert nobn["steps_to_target"]["0.95"]["text"] == "12,000 ± 1,633"
    # 97% without BN: seeds 0 and 1 only; mean/std over those two, one seed counted as not reached.
    s97 = nobn["steps_to_target"]["0.97"]
    assert s97["per_seed"] == [15000, 18000, None]
    assert (s97["reached"], s97["not_reached"], s97["n"]) == (2, 1, 3)
    assert s97["mean"] == pytest.approx(16500.0) and s97["std"] == pytest.approx(1500.0)
    assert s97["text"] == "16,500 ± 1,500; not reached (1/3)"
    s98 = nobn["steps_to_target"]["0.98"]
    assert s98["text"] == "not reached" and s98["mean"] is None and s98["std"] is None
    # Accuracies: max and final, mean and population std over seeds.
    assert bn["max_test_accuracy"]["mean"] == pytest.approx(0.986)
    assert bn["max_test_accuracy"]["std"] == pytest.approx(np.std([0.985, 0.986, 0.987]))
    assert nobn["final_test_accuracy"]["mean"] == pytest.approx(np.mean([0.975, 0.972, 0.96]))
    assert nobn["final_test_accuracy"]["std"] == pytest.approx(np.std([0.975, 0.972, 0.96]))


def test_speedup_exact_lower_bound_and_na(sweep):
    report = build_report(sweep)
    bn = _conf(report, "bn=true lr=0.5")
    assert bn["no_bn_match"] == "bn=false lr=0.5"
    sp = bn["speedup"]
    assert sp["0.95"]["value"] == pytest.approx(10.0) and sp["0.95"]["lower_bound"] is False
    assert sp["0.95"]["text"] == "10.0x"
    # 97%: no BN reached it in 2/3 seeds only -> no speedup is claimed.
    assert sp["0.97"] == {"value": None, "lower_bound": None, "text": "n/a"}
    # 98%: BN in all seeds (mean 2500), no BN in none within 20,000 steps -> >= 20000 / 2500.
    assert sp["0.98"]["value"] == pytest.approx(8.0) and sp["0.98"]["lower_bound"] is True
    assert sp["0.98"]["text"] == ">= 8.0x (lower bound)"
    # The no-BN configurations get no speedup.
    assert all(v["value"] is None for v in _conf(report, "bn=false lr=0.5")["speedup"].values())
    # lr=5: no BN diverged in both completed seeds -> lower bound 20000 / 500.
    assert _conf(report, "bn=true lr=5")["speedup"]["0.95"]["text"] == ">= 40.0x (lower bound)"


def test_diverged_and_failed_counts(sweep):
    report = build_report(sweep)
    nobn5, bn5 = _conf(report, "bn=false lr=5"), _conf(report, "bn=true lr=5")
    assert (nobn5["diverged"], nobn5["failed"], nobn5["completed"]) == (2, 1, 2)
    assert (bn5["diverged"], bn5["failed"], bn5["completed"]) == (0, 1, 3)
    failed = [s for s in nobn5["seeds"] if s["status"] == "failed"]
    assert failed[0]["seed"] == 2 and failed[0]["error"] == "RuntimeError: boom"
    lost = [s for s in bn5["seeds"] if s["status"] == "failed"]
    assert lost[0]["seed"] == 3 and "summary.json" in lost[0]["error"]
    assert nobn5["steps_to_target"]["0.95"]["text"] == "not reached"
    assert nobn5["max_test_accuracy"]["mean"] == pytest.approx(0.2)


def test_verdict_lines(sweep):
    v = build_report(sweep).data["verdicts"]
    assert "At lr=0.5: BN reached 95% in 1,200 ± 163 steps, no BN in 12,000 ± 1,633: 10.0x fewer steps." in v
    assert ("At lr=0.5: BN reached 97% in 1,800 ± 245 steps; no BN reached 97% in 2/3 runs (16,500 ± 1,500 "
            "steps over those) and did not within 20,000 steps in 1/3." in v)
    assert ("At lr=0.5: BN reached 98% in 2,500 ± 408 steps; no BN did not reach 98% within 20,000 steps in "
            "3/3 runs: at least 8.0x fewer steps (lower bound: max_steps / BN steps)." in v)
    assert ("At lr=5: BN reached 95% in 500 ± 0 steps; no BN did not reach 95% within 20,000 steps in 2/2 runs "
            "(2 diverged): at least 40.0x fewer steps (lower bound: max_steps / BN steps)." in v)
    fb = np.array([0.985, 0.986, 0.987]) * 100
    fn = np.array([0.975, 0.972, 0.96]) * 100
    final = (f"At lr=0.5: final test accuracy BN {fb.mean():.2f} ± {fb.std():.2f}%, no BN {fn.mean():.2f} ± "
             f"{fn.std():.2f}%: BN higher by {fb.mean() - fn.mean():.2f} points")
    assert any(line.startswith(final) for line in v), v
    assert any(line.startswith("At lr=5: final test accuracy") and "no BN 2/2 diverged" in line for line in v)
    assert "bn=false lr=5: 2/2 completed runs diverged (at steps 300, 300)." in v
    assert "bn=false lr=5: 1/3 runs failed (RuntimeError: boom)." in v


def test_report_main_writes_all_files(sweep, capsys):
    assert report_main([str(sweep)]) == 0
    for name in rep.REPORT_FILES:
        assert (sweep / name).is_file() and (sweep / name).stat().st_size > 0, name
    for name in ("accuracy_vs_steps.png", "percentiles.png", "stability.png"):
        assert (sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "bn=true lr=0.5" in out and "1,200 ± 163" in out  # the rich table

    md = (sweep / "report.md").read_text(encoding="utf-8")
    assert "| bn=true lr=0.5 | 3 |" in md
    assert "1,200 ± 163" in md and "16,500 ± 1,500; not reached (1/3)" in md and ">= 8.0x (lower bound)" in md
    assert "ddof=0" in md
    for fig in ("accuracy_vs_steps.png", "percentiles.png", "stability.png"):
        assert f"]({fig})" in md
    assert "Steps to reach the baseline's best accuracy" not in md  # no presets in this sweep

    with open(sweep / "report.csv", encoding="utf-8", newline="") as f:
        rows = {r["label"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"bn=true lr=0.5", "bn=false lr=0.5", "bn=true lr=5", "bn=false lr=5"}
    assert float(rows["bn=true lr=0.5"]["steps_to_0.95_mean"]) == pytest.approx(1200)
    assert float(rows["bn=true lr=0.5"]["speedup_0.95"]) == pytest.approx(10.0)
    assert rows["bn=true lr=0.5"]["speedup_0.98_is_lower_bound"] == "1"
    assert rows["bn=false lr=0.5"]["steps_to_0.98_mean"] == ""  # not reached: empty cell
    assert rows["bn=false lr=0.5"]["steps_to_0.97_reached"] == "2"
    assert rows["bn=false lr=5"]["diverged"] == "2" and rows["bn=false lr=5"]["failed"] == "1"

    data = json.loads((sweep / "report.json").read_text())
    assert data["targets"] == TARGETS
    conf = next(c for c in data["configurations"] if c["label"] == "bn=true lr=0.5")
    assert [s["seed"] for s in conf["seeds"]] == [0, 1, 2]
    assert [s["steps_to_target"]["0.95"] for s in conf["seeds"]] == [1000, 1200, 1400]


def test_stability_numbers(sweep):
    report = build_report(sweep)
    bn, nobn = _conf(report, "bn=true lr=0.5"), _conf(report, "bn=false lr=0.5")
    assert set(bn["stability"]) == {"layer1", "layer2", "layer3"}
    assert bn["stability"]["layer1"]["median_shift"] == pytest.approx(0.0)
    assert bn["stability"]["layer1"]["spread_ratio"] == pytest.approx(1.0)
    # no BN: median moved by 0.3, 0.4, 0.5 (seeds 0-2), spread 2 -> 3.
    assert nobn["stability"]["layer3"]["median_shift"] == pytest.approx(0.4)
    assert nobn["stability"]["layer3"]["spread_ratio"] == pytest.approx(1.5)
    assert nobn["stability"]["layer3"]["n"] == 3
    # Diverged runs are left out of the stability means.
    assert _conf(report, "bn=false lr=5")["stability"] == {}


def test_percentile_figure_uses_the_lowest_seed(sweep):
    report = build_report(sweep)
    pairs = rep.figure_pairs(report.groups)
    assert [(nb.label if nb else None, bn.label if bn else None) for nb, bn in pairs] == [
        ("bn=false lr=0.5", "bn=true lr=0.5"), ("bn=false lr=5", "bn=true lr=5")]
    assert rep._lowest_seed_shift(pairs[0][1]).seed == 0


def test_targets_override_recomputes_from_metrics(sweep):
    report = build_report(sweep, targets=[0.9, 0.95])
    bn = _conf(report, "bn=true lr=0.5")
    # 0.9 is not in the summaries' steps_to_target: recomputed from metrics.jsonl.
    assert bn["steps_to_target"]["0.9"]["per_seed"] == [1000, 1200, 1400]
    assert report_main([str(sweep), "--targets", "0.9,0.95"]) == 0
    assert json.loads((sweep / "report.json").read_text())["targets"] == [0.9, 0.95]
    assert report_main(["--targets", "0.95", "0.9", str(sweep)]) == 0  # options before SWEEP_DIR
    assert json.loads((sweep / "report.json").read_text())["targets"] == [0.9, 0.95]


def test_runs_without_config_group_by_summary_fields(tmp_path, capsys):
    root = tmp_path / "nocfg"
    for seed in range(3):
        make_run(root, f"run{seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed], with_config=False)
    make_run(root, "other", bn=True, lr=1.0, seed=0, knots=BN_05[0], with_config=False)
    make_run(root, "live", bn=True, lr=1.0, seed=1, knots=BN_05[0], with_config=False, status="running")
    report = build_report(root)
    confs = {c["label"]: c for c in report.data["configurations"]}
    assert set(confs) == {"lr=0.5 [no config]", "lr=1 [no config]"}
    assert confs["lr=0.5 [no config]"]["completed"] == 3
    assert confs["lr=0.5 [no config]"]["steps_to_target"]["0.95"]["text"] == "1,200 ± 163"
    assert confs["lr=1 [no config]"]["incomplete"] == 1 and confs["lr=1 [no config]"]["completed"] == 1
    assert "bn=true lr=1" not in confs  # no no-BN partner -> a line saying so
    assert any("no matching no-BN configuration" in v for v in report.data["verdicts"])
    assert report_main([str(root)]) == 0


# ------------------------------------------------------------------ Sec. 4.2 table


@pytest.fixture
def presets(tmp_path) -> Path:
    """CIFAR-style presets: baseline (no BN), bn_baseline, bn_x5 and bn_x30 (one seed diverges)."""
    root = tmp_path / "presets"
    kw = dict(max_steps=40_000, every=1000, model="cnn", data="cifar10", targets=[0.7])
    base = {0: [(0, 0.1), (10000, 0.6), (30000, 0.70)],   # max 0.70: never reaches 0.72
            1: [(0, 0.1), (10000, 0.6), (30000, 0.72)],   # reaches 0.72 at 30000
            2: [(0, 0.1), (20000, 0.72), (35000, 0.74)]}  # reaches 0.72 at 20000
    x5 = {s: [(0, 0.1), (4000 + 1000 * s, 0.72), (20000, 0.75 + 0.01 * s)] for s in range(3)}
    x30 = {0: [(0, 0.1), (2000, 0.72), (10000, 0.73)], 1: [(0, 0.1), (3000, 0.72), (10000, 0.74)]}
    for s in range(3):
        make_run(root, f"baseline/{s}", bn=False, lr=0.01, seed=s, knots=base[s], experiment="baseline", **kw)
        make_run(root, f"bn_baseline/{s}", bn=True, lr=0.01, seed=s, knots=[(0, 0.1), (10000, 0.72), (20000, 0.73)],
                 experiment="bn_baseline", **kw)
        make_run(root, f"bn_x5/{s}", bn=True, lr=0.05, seed=s, knots=x5[s], experiment="bn_x5", **kw)
    for s in (0, 1):
        make_run(root, f"bn_x30/{s}", bn=True, lr=0.3, seed=s, knots=x30[s], experiment="bn_x30", **kw)
    make_run(root, "bn_x30/2", bn=True, lr=0.3, seed=2, knots=[(0, 0.1), (1000, 0.3)], experiment="bn_x30",
             status="diverged", diverged_step=1500, **kw)
    return root


def test_sec42_table(presets):
    report = build_report(presets)
    labels = [c["label"] for c in report.data["configurations"]]
    assert labels[0] == "baseline" and set(labels) == {"baseline", "bn_baseline", "bn_x5", "bn_x30"}
    t = report.data["sec42"]
    assert t["target"] == pytest.approx(np.mean([0.70, 0.72, 0.74]))  # baseline best = mean of max accuracies
    rows = {r["label"]: r for r in t["rows"]}
    assert [r["label"] for r in t["rows"]][0] == "baseline"
    assert rows["baseline"]["steps"]["text"] == "25,000 ± 5,000; not reached (1/3)"
    assert rows["baseline"]["multiple_text"] == "1.00x (reference)"
    assert rows["bn_x5"]["steps"]["per_seed"] == [4000, 5000, 6000]
    assert rows["bn_x5"]["multiple"] == pytest.approx(5000 / 25000)
    assert rows["bn_x5"]["multiple_text"] == "0.20x (5.0x fewer)"
    assert rows["bn_x5"]["max_test_accuracy"]["mean"] == pytest.approx(0.76)
    assert rows["bn_baseline"]["multiple_text"] == "0.40x (2.5x fewer)"
    assert rows["bn_x30"]["steps"]["text"] == "2,500 ± 500; not reached (1/3)"
    assert rows["bn_x30"]["multiple_text"] == "0.10x (10.0x fewer) [over 2/3 seeds]"
    assert rows["bn_x30"]["diverged"] == 1
    assert rep.format_multiple(2.5) == "2.50x (2.5x more)"
    # bn_baseline pairs with baseline (same config but BN); bn_x5 has no no-BN partner.
    assert _conf(report, "bn_baseline")["no_bn_match"] == "baseline"
    assert _conf(report, "bn_x5")["no_bn_match"] is None
    v = report.data["verdicts"]
    assert ("bn_x5 reached the baseline's best accuracy (72.00%) in 5,000 ± 816 steps, the baseline in "
            "25,000 ± 5,000 steps in 2/3 runs (not reached in 1/3): 0.20x (5.0x fewer)." in v)
    assert ("bn_x30 reached the baseline's best accuracy (72.00%) in 2,500 ± 500 steps in 2/3 runs (not reached "
            "in 1/3), the baseline in 25,000 ± 5,000 steps in 2/3 runs (not reached in 1/3): 0.10x (10.0x fewer) "
            "[over 2/3 seeds]." in v)


def test_sec42_written_first(presets):
    assert report_main([str(presets)]) == 0
    md = (presets / "report.md").read_text(encoding="utf-8")
    title = "## Steps to reach the baseline's best accuracy (paper Sec. 4.2 form)"
    assert title in md and md.index(title) < md.index("## Verdicts") < md.index("## Results per configuration")
    assert "| bn_x30 | 3/3 | 2,500 ± 500; not reached (1/3) | 0.10x (10.0x fewer) [over 2/3 seeds] |" in md
    assert "1/3 diverged" in md
    data = json.loads((presets / "report.json").read_text())
    assert data["sec42"]["target"] == pytest.approx(0.72)
    assert len(data["sec42"]["rows"]) == 4
    assert (presets / "accuracy_vs_steps.png").stat().st_size > 0


# ------------------------------------------------------------------------ errors


def test_missing_dir_exits_2_with_message(tmp_path, capsys):
    assert report_main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err


def test_dir_without_runs_exits_2(tmp_path, capsys):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    assert report_main([str(tmp_path / "empty")]) == 2
    assert "no run directories" in capsys.readouterr().err


def test_bad_targets_exit_2(sweep, capsys):
    assert report_main([str(sweep), "--targets", "95"]) == 2
    assert "outside (0, 1]" in capsys.readouterr().err
    assert report_main([]) == 2  # argparse: SWEEP_DIR is required


def test_corrupt_files_do_not_crash(tmp_path):
    root = tmp_path / "corrupt"
    make_run(root, "ok", bn=True, lr=0.5, seed=0, knots=BN_05[0])
    bad = make_run(root, "bad", bn=True, lr=0.5, seed=1, knots=BN_05[1])
    (bad / "summary.json").write_text("{not json")
    (bad / "metrics.jsonl").unlink()
    nometrics = make_run(root, "nometrics", bn=True, lr=0.5, seed=2, knots=BN_05[2])
    (nometrics / "metrics.jsonl").unlink()
    (nometrics / "shift.jsonl").write_text("garbage\n")
    report = build_report(root)
    (conf,) = report.data["configurations"]
    assert (conf["runs"], conf["completed"], conf["failed"]) == (3, 1, 2)
    assert conf["steps_to_target"]["0.95"]["text"] == "1,000 ± 0"
    assert report_main([str(root)]) == 0
