"""Tests of `bnexp report` on synthetic run directories with known metrics (no training).

Every expected number is computed by hand (or with numpy's sample std, ddof=1,
the convention the report documents) from the accuracy curves written below.
"""

from __future__ import annotations

import io
import csv
import math
import json
import re
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


def md_rows(md: str) -> list[list[str]]:
    """The rows of every markdown table in ``md`` (cells stripped, "\\|" unescaped; header and
    separator rows included, the separator as its dashes)."""
    return [[c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            for line in md.splitlines() if line.startswith("|")]


def has_row(md: str, *cells: str) -> bool:
    """True when some table row of ``md`` starts with ``cells``."""
    return any(row[:len(cells)] == list(cells) for row in md_rows(md))


# ------------------------------------------------------------------------- tests


def test_grouping_ignores_seed_and_non_experiment_keys(sweep):
    report = build_report(sweep)
    labels = [c["label"] for c in report.data["configurations"]]
    assert labels == ["bn=true lr=0.5", "bn=false lr=0.5", "bn=true lr=5", "bn=false lr=5"]
    assert report.data["varying_keys"] == ["bn.enabled", "lr"]
    runs = {c["label"]: (c["runs"], c["completed"]) for c in report.data["configurations"]}
    assert runs == {"bn=true lr=0.5": (3, 3), "bn=false lr=0.5": (3, 3), "bn=true lr=5": (4, 3),
                    "bn=false lr=5": (3, 2)}
    # the sweep's training in steps: every summary's step (diverged runs at their divergence step; the
    # failed run's summary has none)
    steps = [json.loads(p.read_text()).get("step") for p in sweep.rglob("summary.json")]
    assert steps.count(None) == 1 and report.data["sgd_steps"] == sum(s for s in steps if s is not None) > 0
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
    assert s95["std"] == pytest.approx(np.std([1000, 1200, 1400], ddof=1))  # sample std: 200
    assert s95["text"] == "1,200 ± 200"
    assert nobn["steps_to_target"]["0.95"]["text"] == "12,000 ± 2,000"
    # 97% without BN: seeds 0 and 1 only; mean/std over those two, one seed counted as not reached.
    s97 = nobn["steps_to_target"]["0.97"]
    assert s97["per_seed"] == [15000, 18000, None]
    assert (s97["reached"], s97["not_reached"], s97["n"]) == (2, 1, 3)
    assert s97["mean"] == pytest.approx(16500.0) and s97["std"] == pytest.approx(np.std([15000, 18000], ddof=1))
    assert s97["text"] == "16,500 ± 2,121; not reached (1/3)"
    s98 = nobn["steps_to_target"]["0.98"]
    assert s98["text"] == "not reached" and s98["mean"] is None and s98["std"] is None
    # Accuracies: max and final, mean and sample std over seeds.
    assert bn["max_test_accuracy"]["mean"] == pytest.approx(0.986)
    assert bn["max_test_accuracy"]["std"] == pytest.approx(np.std([0.985, 0.986, 0.987], ddof=1))
    assert nobn["final_test_accuracy"]["mean"] == pytest.approx(np.mean([0.975, 0.972, 0.96]))
    assert nobn["final_test_accuracy"]["std"] == pytest.approx(np.std([0.975, 0.972, 0.96], ddof=1))


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


def test_runs_that_diverged_failed_or_are_incomplete_are_listed(sweep):
    from bnexp.report.render import render_markdown

    md = render_markdown(build_report(sweep).data)
    lines = md.split("## Diverged, failed and incomplete runs\n\n")[1].split("\n\n")[0].splitlines()
    assert len(lines) == 4, lines  # no BN lr=5: 2 diverged, 1 failed; BN lr=5: 1 failed (summary.json lost)
    assert sum("bn=false lr=5, seed" in x and ": diverged (at step " in x for x in lines) == 2
    assert any(x.startswith("- bn=false lr=5, seed 2: failed (RuntimeError: boom)") for x in lines)
    assert any(x.startswith("- bn=true lr=5, seed 3: failed (") and "summary.json" in x for x in lines)


@pytest.mark.slow  # renders the report's figures (> 2.5 s of CPU)
def test_report_main_writes_all_files(sweep, capsys):
    assert report_main([str(sweep)]) == 0
    for name in rep.REPORT_FILES:
        assert (sweep / name).is_file() and (sweep / name).stat().st_size > 0, name
    for name in ("accuracy_vs_steps.png", "percentiles.png", "stability.png"):
        assert (sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "bn=true lr=0.5" in out and "1,200 ± 200" in out  # the rich table

    md = (sweep / "report.md").read_text(encoding="utf-8")
    assert has_row(md, "bn=true lr=0.5", "3")
    assert "1,200 ± 200" in md and "16,500 ± 2,121; not reached (1/3)" in md
    # the claims of both rates: at lr=0.5, no BN needs 10x, 10x and (never reached) >= 20000/2100 of BN's steps;
    # their geometric mean (10 * 10 * 9.524)^(1/3) = 9.84 is then a lower bound too
    assert has_row(md, "lr=0.5", "BN trains in fewer steps", "one view (pre-registered)", "no-BN / BN steps to the main target", "> 1",
                   "0: 10, 1: 10, 2: >= 9.52", ">= 9.84")
    assert "ddof=1" in md and "ddof=0" not in md
    for fig in ("accuracy_vs_steps.png", "percentiles.png", "stability.png"):
        assert f"]({fig})" in md
    assert "Steps to reach the baseline's best accuracy" not in md  # no presets in this sweep

    with open(sweep / "report.csv", encoding="utf-8", newline="") as f:
        rows = {r["label"]: r for r in csv.DictReader(f)}
    assert set(rows) == {"bn=true lr=0.5", "bn=false lr=0.5", "bn=true lr=5", "bn=false lr=5"}
    assert float(rows["bn=true lr=0.5"]["steps_to_0.95_mean"]) == pytest.approx(1200)
    assert rows["bn=false lr=0.5"]["steps_to_0.98_mean"] == ""  # not reached: empty cell
    assert rows["bn=false lr=0.5"]["steps_to_0.97_reached"] == "2"
    assert rows["bn=false lr=5"]["diverged"] == "2" and rows["bn=false lr=5"]["failed"] == "1"

    data = json.loads((sweep / "report.json").read_text())
    assert data["targets"] == TARGETS
    conf = next(c for c in data["configurations"] if c["label"] == "bn=true lr=0.5")
    assert [s["seed"] for s in conf["seeds"]] == [0, 1, 2]
    assert [s["steps_to_target"]["0.95"] for s in conf["seeds"]] == [1000, 1200, 1400]


def _files(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (relative path -> bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow  # renders the report's figures (> 2.5 s of CPU)
def test_single_run_report_goes_to_report_subfolder(tmp_path, capsys):
    # `bnexp report RUN_DIR` on one run: the run's own files (the trainer writes percentiles.png
    # there) stay byte for byte; the report goes to RUN_DIR/report/, also when run again.
    run = make_run(tmp_path, "run", bn=True, lr=0.5, seed=0, knots=BN_05[0])
    (run / "percentiles.png").write_bytes(b"\x89PNG\r\n\x1a\n the trainer's own figure")
    before = _files(run)
    for _ in range(2):
        assert report_main([str(run)]) == 0
        after = _files(run)
        assert {k: after[k] for k in before} == before
        assert {p.name for p in run.iterdir()} == {p.split("/")[0] for p in before} | {"report"}
        out = run / "report"
        assert sorted(p.name for p in out.iterdir()) == sorted(rep.REPORT_FILES)
        assert (out / "percentiles.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert (out / "percentiles.png").read_bytes() != before["percentiles.png"]
        data = json.loads((out / "report.json").read_text())
        assert data["runs"] == 1 and data["sweep_dir"] == str(run)  # report/ is not read as a run
        assert data["configurations"][0]["steps_to_target"]["0.95"]["mean"] == 1000
    assert str(out / "report.md") in "".join(capsys.readouterr().out.split())  # the summary's last line
    # A sweep folder still gets its report at its top level, and no report/ subfolder.
    assert report_main([str(tmp_path)]) == 0
    assert (tmp_path / "report.md").is_file() and not (tmp_path / "report").exists()


def test_figures_are_written_atomically(tmp_path, monkeypatch, capsys):
    # A figure write that fails half-way (disk full) leaves the previous figures whole and no
    # temporary file behind, and the command says why with exit code 2.
    from matplotlib.figure import Figure

    out = tmp_path / "sweep"
    make_run(out, "run", bn=True, lr=0.5, seed=0, knots=BN_05[0])
    assert report_main([str(out)]) == 0
    pngs = {p.name: p.read_bytes() for p in out.glob("*.png")}
    assert set(pngs) == {"accuracy_vs_steps.png", "percentiles.png", "stability.png"}

    def savefig_fails_half_way(self, fname, *args, **kwargs):
        partial = b"\x89PNG\r\n\x1a\n truncated"
        if hasattr(fname, "write"):
            fname.write(partial)
        else:
            Path(fname).write_bytes(partial)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Figure, "savefig", savefig_fails_half_way)
    capsys.readouterr()
    assert report_main([str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot write the report into" in err and "No space left on device" in err
    assert {p.name: p.read_bytes() for p in out.glob("*.png")} == pngs
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


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
    from bnexp.report.figures import figure_rows, lowest_seed_shift

    columns, rows = figure_rows(report.groups)
    assert columns == ["no BN", "BN"]
    assert [(r["no BN"].label, r["BN"].label) for r in rows] == [
        ("bn=false lr=0.5", "bn=true lr=0.5"), ("bn=false lr=5", "bn=true lr=5")]
    assert lowest_seed_shift(report.sweep, rows[0]["BN"]).seed == 0


@pytest.mark.slow  # renders the report's figures (> 2.5 s of CPU)
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
    assert confs["lr=0.5 [no config]"]["steps_to_target"]["0.95"]["text"] == "1,200 ± 200"
    assert confs["lr=1 [no config]"]["incomplete"] == 1 and confs["lr=1 [no config]"]["completed"] == 1
    assert "bn=true lr=1" not in confs
    assert report.data["claims"] == []  # no no-BN partner: nothing to claim
    assert report_main([str(root)]) == 0


def test_a_run_whose_config_is_not_yaml_is_a_warning_naming_it(tmp_path, caplog):
    """A config.yaml cut off mid-write (or edited by hand) was passed over without a word: now a warning names the
    run and the file, and says where its config comes from (summary.json's fields, here the same configuration)."""
    root = tmp_path / "broken"
    for seed in range(3):
        make_run(root, f"run{seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed])
    (root / "run0" / ".hydra" / "config.yaml").write_text("lr: [0.5,\n")
    confs = build_report(root).data["configurations"]
    assert [(c["label"], c["completed"]) for c in confs] == [("bn=true act=sigmoid lr=0.5", 3)]
    assert (f"{root / 'run0'}: .hydra/config.yaml is not a readable YAML mapping; the run's config is taken from "
            "summary.json") in caplog.text


def test_a_budget_that_is_not_a_whole_number_is_a_warning_and_the_summarys_is_used(tmp_path, caplog):
    """trainer.max_steps edited by hand to text ended the report in ValueError (int("lots")): now each run's is a
    warning naming the run and the key, and the budget is summary.json's max_steps."""
    root = tmp_path / "budget"
    for seed in range(3):
        make_run(root, f"run{seed}", bn=True, lr=0.5, seed=seed, knots=BN_05[seed])
        f = root / f"run{seed}" / ".hydra" / "config.yaml"
        f.write_text(f.read_text().replace(f"max_steps: {MAX_STEPS}", "max_steps: lots"))
    confs = build_report(root).data["configurations"]
    assert [(c["completed"], c["max_steps"]) for c in confs] == [(3, MAX_STEPS)]
    assert (f'{root / "run2"}: key trainer.max_steps is "lots", not a whole number of steps; ignored (the budget '
            "comes from summary.json)") in caplog.text


# ------------------------------------------------------------------ Sec. 4.2 presets


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


@pytest.mark.slow  # renders the report's figures (> 2.5 s of CPU)
def test_presets_pair_by_config_and_keep_their_names(presets):
    """Presets are labelled by name; bn_baseline pairs with baseline (same configuration but BN) in the claims,
    bn_x5 has no no-BN partner; the legacy single-budget steps-to-target table is gone (the Sec. 4.2 frontier replaces it)."""
    report = build_report(presets)
    labels = [c["label"] for c in report.data["configurations"]]
    assert labels[0] == "baseline" and set(labels) == {"baseline", "bn_baseline", "bn_x5", "bn_x30"}
    assert _conf(report, "bn_x5")["max_test_accuracy"]["mean"] == pytest.approx(0.76)
    assert _conf(report, "bn_x30")["diverged"] == 1
    assert {r["setting"] for r in report.data["claims"]} == {"lr=0.01"}  # one pair: bn_baseline vs baseline
    speed = next(r for r in report.data["claims"] if r["name"] == "BN trains in fewer steps")
    steps = {(e, s): json.loads((presets / e / str(s) / "summary.json").read_text())["steps_to_target"]["0.7"]
             for e in ("baseline", "bn_baseline") for s in range(3)}  # seed by seed, from the summaries
    assert speed["per_seed"] == {s: pytest.approx((steps["baseline", s] or 40_000) / steps["bn_baseline", s])
                                 for s in range(3)}
    assert "sec42" not in report.data
    assert report_main([str(presets)]) == 0
    md = (presets / "report.md").read_text(encoding="utf-8")
    assert "Steps to reach the baseline's best accuracy" not in md
    assert md.index("## Claims") < md.index("## Results per configuration")
    assert "- bn_x30, seed 2: diverged (at step 1,500)" in md
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
    # no metrics.jsonl but a whole summary.json: the run counts with the summary's numbers (95% at 1,400)
    assert (conf["runs"], conf["completed"], conf["failed"]) == (3, 2, 1)
    assert sorted(conf["steps_to_target"]["0.95"]["per_seed"]) == [1000, 1400]
    (nometrics / "summary.json").write_text(json.dumps({**json.loads((nometrics / "summary.json").read_text()),
                                                        "final_test_accuracy": None}))
    (conf,) = build_report(root).data["configurations"]  # nothing says how it ended: failed
    assert (conf["runs"], conf["completed"], conf["failed"]) == (3, 1, 2)
    assert conf["steps_to_target"]["0.95"]["text"] == "1,000 (1 seed)"  # never "± 0" from one run
    assert report_main([str(root)]) == 0


# ------------------------------------------- Does BN reduce internal covariate shift?

# Hand-chosen ICS numbers. Two settings: at lr=0.5 BN has MORE gradient-based ICS, a smoother landscape
# and noisy BN is nearly as fast; at lr=0.12 the opposite. The scale-free shift measures are fixed
# fractions of the raw W1 (KS = W1 / 4, W1 / spread = W1 / 2), gradient ICS per move = 10 x l2_rel,
# the filter-normalized landscape 5 x the raw one.
# Distribution view: layer i's final W1 from start = W1_BASE * i * (1 + seed), so over layers 1-3 the
# mean is 2 * W1_BASE * (1 + seed): seeds 0, 1 -> mean 3 * W1_BASE, std W1_BASE.
W1_BASE = {"BN": 0.1, "noisy BN": 0.5, "no BN": 0.4}
# Step-to-step W1: k at step 10,000 and 3k at step 20,000 -> mean 2k.
W1_PREV_K = {"BN": 0.05, "noisy BN": 0.3, "no BN": 0.2}
MEAN_SHIFT = {"BN": 0.01, "noisy BN": 0.2, "no BN": 0.3}  # layer i: MEAN_SHIFT * i -> mean 2 * MEAN_SHIFT
# Gradient-based ICS (layer2, layer3) at the two probes: "high" -> per-probe means 0.5, 0.9 -> 0.7, cos 0.8;
# "low" -> 0.25, 0.45 -> 0.35, cos 0.9. The classifier's l2 = 5 must not enter the average.
GRAD = {"high": {"l2": [(0.4, 0.6), (0.8, 1.0)], "cos": (0.9, 0.7)},
        "low": {"l2": [(0.2, 0.3), (0.4, 0.5)], "cos": (0.95, 0.85)}}
# Landscape at the two probes: "smooth" -> beta 3, loss variation 0.2, grad predictiveness 2; "rough" -> 15, 0.6, 6.
LAND = {"smooth": {"beta_smoothness": (2.0, 4.0), "loss_variation": (0.1, 0.3), "grad_predictiveness": (1.0, 3.0)},
        "rough": {"beta_smoothness": (10.0, 20.0), "loss_variation": (0.5, 0.7), "grad_predictiveness": (5.0, 7.0)}}
ICS_SETTINGS = {  # lr -> variant -> (gradient kind, landscape kind)
    0.5: {"BN": ("high", "smooth"), "noisy BN": ("high", "smooth"), "no BN": ("low", "rough")},
    0.12: {"BN": ("low", "rough"), "noisy BN": ("low", "rough"), "no BN": ("high", "smooth")},
}
NOISY_KNOTS = {  # 98% at 2,400 / 2,600 (lr=0.5, factor 2500 / 2250) or 9,000 / 11,000 (lr=0.12, factor 10000 / 2250)
    0.5: {0: [(0, 0.1), (1100, 0.95), (1700, 0.97), (2400, 0.98), (6000, 0.984)],
          1: [(0, 0.1), (1300, 0.95), (1900, 0.97), (2600, 0.98), (6000, 0.985)]},
    0.12: {0: [(0, 0.1), (3000, 0.95), (6000, 0.97), (9000, 0.98)],
           1: [(0, 0.1), (4000, 0.95), (7000, 0.97), (11000, 0.98)]},
}


def make_ics_run(root: Path, variant: str, lr: float, seed: int, *, grad: bool = True, land: bool = True,
                 new: bool = True) -> Path:
    """A run of the ICS study: config with bn.noise, shift.jsonl with shift_metrics (6 records, steps 0 to
    20,000), ics.jsonl with 6 grad_ics and landscape probes, and summary.json with bn_noise and
    probe_time_s; ``new=False``: without the scale-free, per-move and filter-normalized keys (runs
    written before they existed)."""
    bn = variant != "no BN"
    knots = {"BN": BN_05[seed], "no BN": NOBN_05[seed], "noisy BN": NOISY_KNOTS[lr][seed]}[variant]
    d = make_run(root, f"{variant.replace(' ', '_')},lr={lr},seed={seed}", bn=bn, lr=lr, seed=seed, knots=knots)
    cfg = yaml.safe_load((d / ".hydra" / "config.yaml").read_text())
    cfg["bn"].update({"noise": variant == "noisy BN", "noise_a": 0.5, "noise_b": 1.25})
    (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    # 6 monitor records (the evidence rule needs >= 5): step 0, four intermediate ones whose w1_prev
    # is 1.75 k each (so the mean over the 5 records after step 0 is (4 * 1.75 k + 3 k) / 5 = 2 k), the end
    shift = [r for r in _shift(bn, seed, MAX_STEPS) if r["step"] in (0, 20000)]
    shift[1:1] = [{**shift[0], "step": st} for st in (2000, 4000, 6000, 10000)]
    k, base, ms = W1_PREV_K[variant], W1_BASE[variant], MEAN_SHIFT[variant]
    for r in shift:
        sm = {}
        for i in (1, 2, 3):
            if r["step"] == 0:
                vals = dict.fromkeys(("w1_prev", "w1_first", "mean_shift_prev", "mean_shift_first",
                                      "log_std_ratio_prev", "log_std_ratio_first"), 0.0)
            elif r["step"] < 20000:
                vals = {"w1_prev": 1.75 * k, "w1_first": k, "mean_shift_prev": 0.0, "mean_shift_first": 0.0,
                        "log_std_ratio_prev": 0.0, "log_std_ratio_first": 0.0}
            else:
                vals = {"w1_prev": 3 * k, "w1_first": base * i * (1 + seed), "mean_shift_prev": 0.0,
                        "mean_shift_first": ms * i, "log_std_ratio_prev": 0.0, "log_std_ratio_first": 0.1}
            vals["w1_pooled_first"] = vals["w1_first"] / 2  # pooled <= per unit
            if new:
                vals.update(ks_first=vals["w1_first"] / 4, w1_rel_first=vals["w1_first"] / 2,
                            ks_prev=vals["w1_prev"] / 4, ks_floor=0.01, w1_rel_floor=0.01, w1_floor=0.01)
            sm[f"layer{i}"] = vals
        r["shift_metrics"] = sm
        if bn:  # BN's own input Wu moves like the plain network's layer inputs
            r["bn_input_shift_metrics"] = {f"layer{i}": {"w1_first": 4 * vals["w1_first"],
                                                         **({"ks_first": vals["w1_first"]} if new else {})}
                                           for i in (1, 2, 3)}
    _write_jsonl(d / "shift.jsonl", shift)
    gk, lk = ICS_SETTINGS[lr][variant]
    ics = []
    for i, step in enumerate(range(1000, 7000, 1000)):  # 6 probes, alternating the two values
        p = i % 2
        if grad:  # ||G|| = 2, so ||G - G'|| / ||G|| = l2 / 2
            l2, cos = GRAD[gk]["l2"][p], GRAD[gk]["cos"]
            layers = {"layer1": {"l2": 0.0, "l2_rel": 0.0, "cos": 1.0, "g_norm": 2.0, "trivial": True},
                      "layer2": {"l2": l2[0], "l2_rel": l2[0] / 2, "cos": cos[0], "g_norm": 2.0, "trivial": False},
                      "layer3": {"l2": l2[1], "l2_rel": l2[1] / 2, "cos": cos[1], "g_norm": 2.0, "trivial": False},
                      "classifier": {"l2": 5.0, "l2_rel": 2.5, "cos": 0.1, "g_norm": 2.0, "trivial": False}}
            if new:
                for v in layers.values():
                    v.update(move_rel=0.1, l2_rel_per_move=10 * v["l2_rel"])
            ics.append({"step": step, "kind": "grad_ics", "layers": layers})
        if land:  # the scale-invariant values are 10x the raw ones
            ics.append({"step": step, "kind": "landscape", **{key: v[p] for key, v in LAND[lk].items()},
                        **{f"rel_{key}": 10 * v[p] for key, v in LAND[lk].items()},
                        **({f"fn_{key}": 5 * v[p] for key, v in LAND[lk].items()} if new else {}),
                        "loss": 1.0, "grad_norm": 1.0, "step_sizes": [0.0, 0.1], "losses": [1.0, 0.9]})
    if ics:
        _write_jsonl(d / "ics.jsonl", ics)
    summary = json.loads((d / "summary.json").read_text())
    summary.update({"bn_noise": variant == "noisy BN",
                    "probe_time_s": {"eval": 1.0, "monitor": 2.0, "grad_ics": 3.0 + seed, "landscape": 4.0}})
    (d / "summary.json").write_text(json.dumps(summary))
    return d


@pytest.fixture
def ics_sweep(tmp_path) -> Path:
    """BN, noisy BN and no BN x lr = 0.5, 0.12 x seeds 0, 1, with every ICS measurement."""
    root = tmp_path / "ics"
    for lr in ICS_SETTINGS:
        for variant in ("BN", "noisy BN", "no BN"):
            for seed in (0, 1):
                make_ics_run(root, variant, lr, seed)
    return root


def _ics(report, label: str) -> dict:
    return _conf(report, label)["ics"]


def test_ics_labels_name_the_bn_variants(ics_sweep):
    report = build_report(ics_sweep)
    labels = [c["label"] for c in report.data["configurations"]]
    assert labels == ["BN lr=0.12", "noisy BN lr=0.12", "no BN lr=0.12",
                      "BN lr=0.5", "noisy BN lr=0.5", "no BN lr=0.5"]
    assert [c["ics"]["label"] for c in report.data["configurations"]] == labels
    assert _ics(report, "noisy BN lr=0.5")["variant"] == "noisy BN"
    # The noisy-BN claims say which noisy BN they are about.
    noisy = [r for r in report.data["claims"] if r["name"].startswith("Noisy BN") and r["setting"] == "lr=0.5"]
    assert len(noisy) == 2


def test_ics_labels_of_presets_and_older_sweeps():
    from bnexp.report.groups import ConfigGroup as mk, label_groups
    groups = [mk("a", {"experiment": "bn_baseline", "bn.enabled": True, "bn.noise": False, "lr": 0.1}),
              mk("b", {"experiment": "bn_baseline", "bn.enabled": True, "bn.noise": True, "lr": 0.1}),
              mk("c", {"experiment": "bn_baseline", "bn.enabled": False, "bn.noise": False, "lr": 0.1})]
    label_groups(groups)
    assert [g.label for g in groups] == ["BN (bn_baseline preset)", "noisy BN (bn_baseline preset)",
                                         "no BN (bn_baseline preset)"]
    presets = [mk("a", {"experiment": "baseline", "bn.enabled": False, "bn.noise": False}),
               mk("b", {"experiment": "bn_x5", "bn.enabled": True, "bn.noise": False})]
    label_groups(presets)
    assert [g.label for g in presets] == ["baseline", "bn_x5"]  # unique preset names stay
    assert [g.variant_label for g in presets] == ["no BN (baseline preset)", "BN (bn_x5 preset)"]
    old = [mk("a", {"bn.enabled": True, "lr": 0.5}), mk("b", {"bn.enabled": False, "lr": 0.5})]
    label_groups(old)  # configs without bn.noise keep the bn=true / bn=false labels
    assert [g.label for g in old] == ["bn=true", "bn=false"]
    assert [g.variant_label for g in old] == ["BN", "no BN"]


def test_ics_means_over_seeds(ics_sweep):
    report = build_report(ics_sweep)
    bn, nb = (_ics(report, label)["measures"] for label in ("BN lr=0.5", "no BN lr=0.5"))
    assert _ics(report, "BN lr=0.5")["seeds"] == [0, 1]
    assert bn["shift.w1_prev"]["mean"] == pytest.approx(0.1)  # mean of 0.05 and 0.15 (step 0 excluded)
    assert bn["shift.w1_first"]["mean"] == pytest.approx(0.3)  # layers avg 0.2 (seed 0), 0.4 (seed 1)
    assert bn["shift.w1_first"]["std"] == pytest.approx(np.std([0.2, 0.4], ddof=1))
    assert bn["shift.w1_first"]["per_seed"] == pytest.approx([0.2, 0.4])
    assert bn["shift.w1_first.last"]["mean"] == pytest.approx(0.45)  # layer3: 0.3 and 0.6
    assert bn["shift.ks_first"]["mean"] == pytest.approx(0.075)
    assert bn["shift.w1_rel_first"]["mean"] == pytest.approx(0.15)
    assert bn["shift.ks_prev"]["mean"] == pytest.approx(0.025) and bn["shift.ks_floor"]["mean"] == pytest.approx(0.01)
    assert bn["shift.mean_shift_first"]["mean"] == pytest.approx(0.02)
    assert bn["bn_input.w1_first"]["mean"] == pytest.approx(1.8)  # BN's own input Wu: 4 x layer3's
    assert nb["shift.w1_first"]["mean"] == pytest.approx(1.2) and nb["shift.w1_prev"]["mean"] == pytest.approx(0.4)
    assert "bn_input.w1_first" not in nb
    # layer2..layerK: layer1 (0 by definition) and the classifier (l2 = 5) left out
    assert bn["grad.l2"]["mean"] == pytest.approx(0.7) and bn["grad.l2"]["std"] == pytest.approx(0.0)
    assert bn["grad.cos"]["mean"] == pytest.approx(0.8) and bn["grad.l2_rel"]["mean"] == pytest.approx(0.35)
    assert bn["grad.l2_rel_per_move"]["mean"] == pytest.approx(3.5)  # 10 x l2_rel
    assert bn["grad.move_rel"]["mean"] == pytest.approx(0.1)
    assert nb["grad.l2"]["mean"] == pytest.approx(0.35) and nb["grad.cos"]["mean"] == pytest.approx(0.9)
    assert [bn[f"land.{k}"]["mean"] for k in ("beta_smoothness", "loss_variation", "grad_predictiveness")] == \
        pytest.approx([3.0, 0.2, 2.0])
    assert bn["land.fn_beta_smoothness"]["mean"] == pytest.approx(15.0) and bn["land.rel_beta_smoothness"]["mean"] == 30
    assert nb["land.beta_smoothness"]["mean"] == pytest.approx(15.0)
    assert bn["time.grad_ics"]["mean"] == pytest.approx(3.5) and bn["time.grad_ics"]["std"] == pytest.approx(np.std([3, 4], ddof=1))
    assert bn["time.landscape"]["mean"] == pytest.approx(4.0)


def test_ics_claims_of_the_two_settings(ics_sweep):
    # 2 seeds per configuration: every verdict is "inconclusive", but the per-seed ratios are there
    rows = {(r["setting"], r["name"], r["quantity"]): r for r in build_report(ics_sweep).data["claims"]}
    assert {r["verdict"] for r in rows.values()} == {"inconclusive"}
    grad = "BN / no-BN ||G - G'|| / ||G|| per relative movement of the earlier layers (l2_rel_per_move), layers 2..K"
    assert rows[("lr=0.5", "BN reduces gradient ICS", grad)]["per_seed"] == pytest.approx({0: 2.0, 1: 2.0})
    assert rows[("lr=0.12", "BN reduces gradient ICS", grad)]["per_seed"] == pytest.approx({0: 0.5, 1: 0.5})
    land = "BN / no-BN effective beta-smoothness along the gradient, filter-normalized (fn_beta_smoothness)"
    assert rows[("lr=0.5", "BN smooths the landscape", land)]["per_seed"] == pytest.approx({0: 0.2, 1: 0.2})
    ks = rows[("lr=0.5", "BN reduces shift", "no-BN / BN KS distance from the start, mean over hidden layers")]
    assert ks["per_seed"] == pytest.approx({0: 4.0, 1: 4.0}) and ks["reason"] == "2 seed(s), fewer than 3"
    # noisy BN (KS 0.25, 0.5) exceeds no BN (0.2, 0.4) in both seeds: its premise is met at noise_scale 1
    # matched progress: every training loss is 0.9 (make_run), so both nets match at their first probe (step
    # 1000), where BN's l2_rel_per_move is 2.5 and no BN's 1.25 (GRAD, probe 0): ratio 2 in both seeds
    matched = next(r for r in rows.values() if r["setting"] == "lr=0.5" and r["view"] == "matched training progress")
    assert matched["preregistered"] and matched["per_seed"] == pytest.approx({0: 2.0, 1: 2.0})
    assert matched["matched"][0] == pytest.approx({"level": 0.9, "step_a": 1000, "step_b": 1000, "value_a": 2.5,
                                                   "value_b": 1.25, "ratio": 2.0, "rate_a": 0.5, "rate_b": 0.5})
    raw = rows[("lr=0.5", "BN smooths the landscape",
                "BN / no-BN effective beta-smoothness along the gradient, raw (beta_smoothness)")]
    assert raw["preregistered"] and raw["per_seed"] == pytest.approx({0: 0.2, 1: 0.2})  # 3 / 15 (BN / no BN raw)
    keep = rows[("lr=0.12", "Noisy BN keeps BN's speed", "BN / noisy-BN steps to the main target")]
    assert keep["noise_scale"] == 1.0 and keep["target"] == 0.97
    assert keep["per_seed"] == pytest.approx({0: 1500 / 6000, 1: 1800 / 7000})


@pytest.mark.slow  # renders the report's figures (> 2.5 s of CPU)
def test_ics_report_files(ics_sweep, capsys):
    assert report_main([str(ics_sweep)]) == 0
    for name in rep.ICS_FILES:
        assert (ics_sweep / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    md = (ics_sweep / "report.md").read_text(encoding="utf-8")
    assert "## Does BN reduce internal covariate shift?" in md and "## Claims" in md
    assert "What this sweep supports" not in md
    # KS (mean, last layer, floor), W1 / spread (mean, last layer, floor), raw W1, BN input KS, KS step to step
    # two seeds: the sample std is |a - b| / sqrt(2)
    assert has_row(md, "BN lr=0.5", "2", "0.075 ± 0.035", "0.1125 ± 0.053", "0.01 ± 0", "0.15 ± 0.071",
                   "0.225 ± 0.11", "0.01 ± 0", "0.3 ± 0.14", "0.45 ± 0.21", "0.025 ± 0")
    assert has_row(md, "no BN lr=0.5", "2", "0.3 ± 0.14", "0.45 ± 0.21", "0.01 ± 0", "0.6 ± 0.28", "0.9 ± 0.42",
                   "0.01 ± 0", "1.2 ± 0.57", "not measured", "0.1 ± 0")
    # per move, relative and movement, cos, filter-normalized beta and loss variation, scale-invariant, raw beta
    assert has_row(md, "no BN lr=0.5", "2", "1.75 ± 0", "0.175 ± 0", "0.1 ± 0", "0.9 ± 0", "75 ± 0", "3 ± 0",
                   "150 ± 0", "15 ± 0")
    assert has_row(md, "BN lr=0.5", "1 ± 0", "2 ± 0", "3.5 ± 0.71", "4 ± 0")
    for name in rep.ICS_FILES:
        assert f"]({name})" in md
    data = json.loads((ics_sweep / "report.json").read_text())
    assert data["ics"]["title"] == rep.ICS_TITLE and data["ics"]["main_target"] == 0.97
    # 11 rows per setting: 4 shift views, steps, gradient ICS (matched progress, same steps), landscape (raw,
    # filter-normalized), 2 noisy-BN rows
    assert len(data["claims"]) == 30 and set(rep.ICS_FILES) <= set(data["files"])
    assert "matched training progress (pre-registered)" in md and "filter-normalized (pre-registered)" not in md
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # the terminal lists the claims (a cell wraps at 80 columns); ICS tables: report.md
    assert "BN smooths the" in flat and "landscape (raw)" in flat


@pytest.mark.slow  # renders the report's figures (> 2.5 s of CPU)
def test_ics_partly_measured_and_absent(tmp_path, sweep):
    # Only the distribution view (no ics.jsonl) of runs written before the scale-free measures: the
    # other views are "not measured", one figure only, every claim row still there
    root = tmp_path / "partial"
    for variant in ("BN", "no BN"):
        make_ics_run(root, variant, 0.5, 0, grad=False, land=False, new=False)
    report = build_report(root)
    assert report.data["ics"]["figures"] == ["ics_distribution.png"]
    assert not any(k.startswith("grad.") for k in _ics(report, "BN")["measures"])
    rows = report.data["claims"]
    assert len(rows) == 13 and all(r["verdict"] == "inconclusive" for r in rows)
    assert rows[0]["reason"] == "ks_first is not in the records of no BN and BN"
    assert [r["view"] for r in rows[5:]] == ["matched training progress", "same steps", "raw", "filter-normalized",
                                           "Def. 2.1 raw L2, same steps",
                                           "Def. 2.1 raw L2, matched progress at equal rates",
                                           "Def. 2.1 1 - cos, same steps", "Def. 2.1 1 - cos, matched progress at equal rates"]
    for r in rows[5:7]:  # both views of gradient ICS
        assert r["reason"] == ("l2_rel_per_move is not in the records of BN and no BN (it is recorded with "
                               "monitor.grad_ics=true, off by default: add it to the sweep's command)")
    for r in rows[7:9]:  # both views of the landscape
        assert r["reason"].endswith("(it is recorded with monitor.landscape=true, off by default: add it to the "
                                    "sweep's command)"), r["reason"]
    for r in rows[9:]:  # Def. 2.1's raw rows, from the gradient ICS records too
        assert r["reason"].endswith("(it is recorded with monitor.grad_ics=true, off by default: add it to the "
                                    "sweep's command)"), r["reason"]
    assert report_main([str(root)]) == 0
    assert (root / "ics_distribution.png").is_file()
    assert not (root / "ics_gradient.png").exists() and not (root / "ics_landscape.png").exists()
    assert has_row((root / "report.md").read_text(), "BN", "1", "not measured", "not measured")
    # A sweep without any of these data: no section, no ics_*.png, labels as before.
    report = build_report(sweep)
    assert report.data["ics"] is None
    assert all(c["ics"] is None for c in report.data["configurations"])
    assert report_main([str(sweep)]) == 0
    assert rep.ICS_TITLE not in (sweep / "report.md").read_text(encoding="utf-8")
    assert not list(sweep.glob("ics_*.png"))
    assert json.loads((sweep / "report.json").read_text())["files"] == list(rep.REPORT_FILES)


def test_the_per_run_table_holds_every_number_under_one_rule(sweep):
    """One row per run: budget, m, normalizer code, best and final test accuracy, steps to each target with
    its censoring flag and the left-chance flag (best test accuracy above 10% + 5 points), by hand."""
    from bnexp.analysis.runs import find_run_dirs, load_sweep
    from bnexp.analysis.rules import CHANCE

    s = load_sweep(find_run_dirs(sweep), targets=[0.95, 0.97])
    t = s.table.set_index(s.table["path"].map(lambda p: Path(p).name))
    assert CHANCE == pytest.approx(0.15)
    bn0 = t.loc["bn=true,lr=0.5,seed=0"]
    assert (bn0["budget"], bn0["norm"], bn0["status"]) == (MAX_STEPS, "batch", "finished")
    assert (bn0["steps_to_0.95"], bn0["censored_0.95"], bn0["left_chance"]) == (1000, False, True)
    assert bn0["max_test_accuracy"] == pytest.approx(0.985) and bn0["final_test_accuracy"] == pytest.approx(0.985)
    nobn2 = t.loc["bn=false,lr=0.5,seed=2"]  # never reaches 97% within 20,000 steps: censored at the budget
    assert nobn2["norm"] == "none" and math.isnan(nobn2["steps_to_0.97"]) and nobn2["censored_0.97"]
    diverged = t.loc["bn=false,lr=5,seed=0"]  # best 20% > 15%: it left chance before it diverged
    assert diverged["status"] == "diverged" and diverged["left_chance"] and diverged["censored_0.95"]
    failed = t.loc["bn=false,lr=5,seed=2"]  # not completed: neither censored nor counted as having learned
    assert failed["status"] == "failed" and not failed["censored_0.95"] and not failed["left_chance"]
    first = s.reach(0.9).iloc[list(t.index).index("bn=true,lr=0.5,seed=0")]  # a target added on demand
    assert (first["steps"], first["censored"]) == (1000, False)  # 86.5% at step 900, 95% at 1,000


def test_a_run_that_diverged_after_learning_ends_at_chance_for_every_section(tmp_path):
    """A run at 90% that diverges at step 1,500: its best accuracy stays 90%, but the network it ended with has
    non-finite weights, so its final test and train accuracy count as chance (1 / NUM_CLASSES) in the per-run
    table, the configuration's statistics and the frontier alike, not its last evaluation before the divergence."""
    from bnexp.analysis.frontier import runs_table
    from bnexp.analysis.runs import find_run_dirs, load_sweep
    from bnexp.analysis.rules import NUM_CLASSES

    make_run(tmp_path, "bn=true,lr=9,seed=0", bn=True, lr=9.0, seed=0, knots=[(0, 0.1), (500, 0.9)],
             status="diverged", diverged_step=1500, experiment="bn_x5")
    make_run(tmp_path, "bn=true,lr=9,seed=1", bn=True, lr=9.0, seed=1, knots=[(0, 0.1), (500, 0.9)],
             experiment="bn_x5")
    s = load_sweep(find_run_dirs(tmp_path))
    t = s.table.set_index(s.table["path"].map(lambda p: Path(p).name))
    gone, kept = t.loc["bn=true,lr=9,seed=0"], t.loc["bn=true,lr=9,seed=1"]
    assert json.loads((tmp_path / "bn=true,lr=9,seed=0" / "summary.json").read_text())["final_test_accuracy"] == 0.9
    assert gone["max_test_accuracy"] == pytest.approx(0.9) and gone["final_test_accuracy"] == 1 / NUM_CLASSES
    assert kept["final_test_accuracy"] == pytest.approx(0.9)
    rep = build_report(tmp_path)
    (conf,) = rep.data["configurations"]
    assert conf["final_test_accuracy"]["mean"] == pytest.approx((0.9 + 1 / NUM_CLASSES) / 2)
    assert [r["final_test_accuracy"] for r in conf["seeds"]] == pytest.approx([1 / NUM_CLASSES, 0.9])
    front = runs_table(s)
    assert front.set_index("seed").loc[0, "final_test_accuracy"] == 1 / NUM_CLASSES


@pytest.fixture
def quick_sweep(tmp_path, monkeypatch) -> Path:
    """The README's 3-minute sweep in form: BN and no BN x seeds 0-2 at one rate, the distribution view of the
    ICS recorded (on by default), the gradient ICS and the landscape not (off by default)."""
    monkeypatch.setitem(NOISY_KNOTS[0.5], 2, NOISY_KNOTS[0.5][1])
    root = tmp_path / "quick"
    for variant in ("BN", "no BN"):
        for seed in (0, 1, 2):
            make_ics_run(root, variant, 0.5, seed, grad=False, land=False)
    return root


def _terminal(sweep_dir: Path, width: int) -> str:
    from rich.console import Console

    from bnexp.report.command import print_table

    console = Console(width=width, record=True, file=io.StringIO())
    print_table(build_report(sweep_dir), console)
    return console.export_text()


def _summary(d: dict, width: int) -> tuple[str, str]:
    """(the markdown of report.json's dict ``d``'s terminal summary, the text rich prints of it at ``width``)."""
    from rich.console import Console
    from rich.markdown import Markdown

    from bnexp.report.render import render_summary

    md = render_summary(d, "sweep", "sweep/report.md", width)
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(Markdown(md))
    return md, console.export_text()


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("which", ["quick_sweep", "sweep"])
def test_the_terminal_summary_fits_its_width_without_cut_cells(request, which, width):
    text = _terminal(request.getfixturevalue(which), width)
    lines = text.splitlines()
    assert "…" not in text  # rich cuts a word wider than its column with an ellipsis
    assert max(map(len, lines)) <= width
    assert len(lines) < (60 if which == "quick_sweep" else 80), text  # two settings, failed runs: longer
    assert text.count("Mean ± sd") == 1  # said once, not in every cell
    assert str(request.getfixturevalue(which) / "report.md") in "".join(text.split())  # folded, never cut
    if which == "sweep":  # lr=0.5: no BN needs 10x, 10x and >= 20000/2100 of BN's steps (test_report.py)
        assert ">= 9.84" in text and "2 seed(s), fewer than 3" in text  # lr=5: a reason, once as a note
            # no BN lr=5: 2 diverged, 1 failed; BN lr=5: 1 failed (summary.json lost)
        assert " ".join(text.split()).count("lr=5, seed") == 4 and "(RuntimeError: boom)" in text
        # each setting heads its own claims table, once, whole on its line (never cut inside a claim cell)
        claims = lines[next(i for i, line in enumerate(lines) if line.startswith("Claims")):]
        assert [line.strip() for line in claims if line.strip() in ("lr=0.5", "lr=5")] == ["lr=0.5", "lr=5"]
        assert not any(line.lstrip().startswith(("lr=0.5:", "lr=5:")) for line in lines)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("study", ["depth", "batch_size", "inference_statistics"])
def test_a_study_sweeps_terminal_summary_is_its_own_table_claims_and_findings(study, width):
    """scripts/study.sh ends with ``bnexp report``: its summary shows the study's configurations (the evaluation
    seeds' table, not one wrapped row per key combination of every tuning run), each study claim with the
    verdict after the plan's marks and its Holm-adjusted verdict where that differs, and the findings; no cell is
    cut or broken across lines at 80 or 120 columns (the committed docs reports as input)."""
    d = json.loads((Path(__file__).parents[1] / "docs/studies" / study / "report.json").read_text())
    sec = d["study"]
    md, text = _summary(d, width)
    lines, flat = text.splitlines(), " ".join(text.split())
    assert "…" not in text and max(map(len, lines)) <= width
    assert f"Study: {sec['title']}" in flat and "Mean ± sd (ddof=1) over the finished seeds" not in flat
    table = lines[next(i for i, ln in enumerate(lines) if "───" in ln) + 1:]
    rows = table[:next(i for i, ln in enumerate(table) if not ln.strip())]
    assert len(rows) == len(sec["table"])  # one line per configuration: no cell wraps
    first_stat = next(k for k, _ in sec["columns"] if isinstance(sec["table"][0].get(k), dict))
    for row, line in zip(sec["table"], rows):
        st = row[first_stat]
        assert f"{st['mean']:.2f} ± {st['std']:.2f}" in line and f" {row['lr']:g} " in line
    notes = flat.split("Findings")[0]
    for c in sec["claims"]:  # a row of the claims table: claim | rule | mean | interval | verdict (note)
        shown = c.get("marked_verdict") or c["verdict"]
        assert re.search(r"\| " + re.escape(" ".join(c["name"].split())) + r" +\| [<>] [\d.]+ +\| (>= |<= )?"
                         + re.escape(f"{c['mean']:.3g}") + r" +\| [^|]+\| " + re.escape(shown) + r"( \(\d\))? +\|", md)
        if c.get("holm_verdict") not in (None, c["verdict"]):  # Holm adjusts the verdict before the marks
            assert f"Holm-adjusted verdict: {c['holm_verdict']} (p = {c['holm_p']:.2g})" in notes
        for mark in c.get("marks") or []:
            assert " ".join(mark.split()) in notes
    for finding in sec["findings"]:
        assert " ".join(finding.split())[:60] in flat


@pytest.mark.parametrize("width", [80, 120])
def test_a_held_out_designs_terminal_summary_tables_the_evaluation_runs_and_its_speedups(width):
    """The MNIST reproduction (docs/mnist/report.json: tuning grids on seeds 100-102, each network at its chosen
    rate on the evaluation seeds): the terminal tables only the configurations an evaluation seed ran, names how
    many tuning configurations report.md holds, and shows BN's speedup at each network's chosen rate, claim by
    claim with its verdict, before the other claims."""
    d = json.loads((Path(__file__).parents[1] / "docs/mnist/report.json").read_text())
    scored = [c for c in d["configurations"] if {r["seed"] for r in c["seeds"]} <= set(d["evaluation_seeds"])]
    md, text = _summary(d, width)
    flat = " ".join(text.split())
    assert "…" not in text and max(map(len, text.splitlines())) <= width
    first = md.split("Speedup at each network's own best rate")[0]
    assert sum(c["label"] in first for c in d["configurations"]) == len(scored) == 5
    assert f"the {len(d['configurations']) - len(scored)} of the tuning grids (seeds 100, 101, 102)" in flat
    speedups = md.split("Speedup at each network's own best rate")[1].split("**Claims**")[0]
    for c in d["best_rate_speedups"]:
        assert re.search(r"\| " + re.escape(c["name"]) + r" +\| > 1 +\| [^|]+\| [^|]+\| "
                         + re.escape(c.get("marked_verdict") or c["verdict"]), speedups), c["name"]


def test_a_table_fits_only_when_no_number_cell_breaks_across_lines():
    """The terminal's column rule: rich's Markdown on the console width decides, not a count of characters."""
    from bnexp.report.render import _fits

    cols = {"configuration": ["BN at a rate of 0.5 with many words"], "steps to 95%": ["171,000 ± 7,746 (4/5)"]}
    assert _fits(cols, 80)
    assert not _fits(cols, 30)  # the steps cell would wrap
    assert _fits(cols, 50, may_wrap=("configuration",)) and not _fits(cols, 50)  # the label wraps, the number not
    assert not _fits(cols, 30, may_wrap=("configuration",))  # a header cut with "…" never fits


def test_a_setting_where_no_seed_ran_both_sides_is_named_in_one_line_not_tabled():
    """A held-out seed that ran only one side of a BN / no-BN pair (the CIFAR-10 frontier's seed 2 of the baseline
    at a rung BN-Baseline ran on seeds 0 and 1) gives claim rows with no paired seed (n = 0): the terminal names
    that setting once instead of a table of empty rows; a setting with a paired seed keeps its table."""
    import json as _json

    from bnexp.report.render import terminal_claims

    def row(setting: str, n: int, view: str) -> dict:
        return {"name": "BN reduces shift", "view": view, "setting": setting, "needs": None, "n": n,
                "mean": 1.5 if n else None, "ci_low": 1.2 if n > 1 else None, "ci_high": 1.9 if n > 1 else None,
                "interval": None, "verdict": "supported" if n > 2 else "inconclusive",
                "reason": "" if n > 2 else f"{n} seed(s), fewer than 3", "direction": ">", "threshold": 1.0}

    rows = [row("steps=3000", 0, "KS"), row("steps=3000", 0, "W1"), row("steps=48000", 3, "KS"),
            row("steps=48000", 2, "W1"), row("steps=6000", 0, "KS")]
    groups, _, notes = terminal_claims(rows)
    assert [(g["setting"], g["paired"], len(g["rows"])) for g in groups] == [
        ("steps=3000", False, 0), ("steps=48000", True, 2), ("steps=6000", False, 0)]
    assert notes == ["2 seed(s), fewer than 3"]  # the unpaired rows' reasons are not numbered
    d = _json.loads(_json.dumps({"configurations": [], "targets": [], "claims": rows}))
    text = " ".join(_summary(d, 80)[1].split())
    assert "No seed ran both configurations of these settings" in text and "steps=3000; steps=6000." in text
    assert text.count("BN reduces shift") == 2 and "0 seed(s)" not in text


def test_a_supported_row_with_a_second_reading_gets_a_terminal_note():
    """The pre-registered matched-progress row keeps its verdict and gains a second reading where its matched
    probes lie at different learning rates (docs/ics/PLAN.md, amendment): the terminal numbers it as a note."""
    from bnexp.report.render import terminal_claims

    row = {"name": "BN reduces gradient ICS", "view": "matched training progress", "setting": "", "needs": None,
           "n": 3, "mean": 0.25, "ci_low": 0.1, "ci_high": 0.7, "interval": None, "verdict": "supported",
           "reason": "the 95% interval lies below 1", "direction": "<", "threshold": 1.0}
    (plain,), _, none = terminal_claims([row])
    (read,), _, notes = terminal_claims([{**row, "second_reading": "schedule-confounded: ..."}])
    assert plain["rows"][0]["note"] is None and none == []
    assert read["rows"][0]["note"] == 1 and notes == ["schedule-confounded: ..."]


def test_claims_whose_measure_is_off_by_default_are_named_once_not_as_rows(quick_sweep):
    text = " ".join(_terminal(quick_sweep, 80).split())
    assert text.count("add monitor.grad_ics=true") == 1 and text.count("add monitor.landscape=true") == 1
    assert "BN reduces gradient ICS (matched training progress; same steps;" in text
    assert "BN smooths the landscape (raw; filter-normalized)" in text
    claims = text.split("Claims")[1].split("Not measured")[0]
    assert "gradient ICS" not in claims and "landscape" not in claims and "BN reduces shift" in claims
    # report.json keeps every row, inconclusive, with the key that records the measure
    rows = [r for r in build_report(quick_sweep).data["claims"] if r.get("needs")]
    assert sorted({r["needs"] for r in rows}) == ["monitor.grad_ics", "monitor.landscape"]
    assert len(rows) == 8 and {r["verdict"] for r in rows} == {"inconclusive"}  # 2 + 4 Def. 2.1 rows + 2 landscape


def test_bnexp_report_follows_COLUMNS(quick_sweep, monkeypatch, capsys):
    import bnexp.report.command as cli

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(cli, "write_report", lambda report: [])  # the files are tested elsewhere; text only
    assert report_main([str(quick_sweep)]) == 0
    out = capsys.readouterr().out.split("wrote into ")[0]  # then one line of file names, as long as they are
    assert "Claims" in out and max(len(line) for line in out.splitlines()) <= 80 and "…" not in out


def test_the_written_files_line_names_each_subfolder_once(tmp_path):
    """`bnexp report`'s last line: the report's files by name, the aggregate runs' event files as their folder
    with a count (18 configurations would otherwise repeat one event file name 18 times)."""
    from bnexp.report.command import written_text

    paths = [tmp_path / "report.md", tmp_path / "report.json"]
    paths += [tmp_path / "aggregate" / f"bn=true,seed={i}" / "events.out.tfevents.bnexp-aggregate" for i in range(3)]
    paths.append(tmp_path / "frontier.png")
    assert written_text(paths, tmp_path) == "report.md, report.json, aggregate/ (3 files), frontier.png"
    assert written_text([tmp_path / "aggregate" / "a" / "e"], tmp_path) == "aggregate/ (1 file)"


def test_ladder_labels_name_the_budget_once_and_keep_a_key_that_varies_on_its_own():
    from bnexp.report.groups import ConfigGroup as mk, label_groups

    def rung(steps: int, precision: str, **extra) -> dict:
        return {"experiment": "baseline", "bn.enabled": False, "bn.noise": False, "lr": 0.025,
                "trainer.max_steps": steps, "optim.decay_steps": steps // 5, "trainer.eval_every": steps // 4,
                "trainer.hist_every": steps // 2, "trainer.precision": precision, "scale.precision": precision,
                "scale.base_lr": 0.025, **extra}

    ladder = [mk("a", rung(3000, "fp32")), mk("b", rung(6000, "fp32")), mk("c", rung(48000, "bf16"))]
    label_groups(ladder)
    assert [g.label for g in ladder] == ["baseline trainer.max_steps=3000 trainer.precision=fp32",
                                         "baseline trainer.max_steps=6000 trainer.precision=fp32",
                                         "baseline trainer.max_steps=48000 trainer.precision=bf16"]
    assert ladder[2].variant_label == "no BN trainer.max_steps=48000 trainer.precision=bf16 (baseline preset)"
    # decay_steps that vary at one budget are a setting of their own: named
    own = [mk("a", rung(6000, "fp32")), mk("b", rung(6000, "fp32", **{"optim.decay_steps": 600}))]
    label_groups(own)
    assert [g.label for g in own] == ["baseline optim.decay_steps=1200", "baseline optim.decay_steps=600"]
    # a preset source that does not follow the key it sets (two lrs at one base) stays named
    free = [mk("a", {"bn.enabled": True, "lr": 0.1, "scale.base_lr": 0.1}),
            mk("b", {"bn.enabled": True, "lr": 0.5, "scale.base_lr": 0.1}),
            mk("c", {"bn.enabled": True, "lr": 0.5, "scale.base_lr": 0.2})]
    label_groups(free)
    assert [g.label for g in free] == ["lr=0.1 scale.base_lr=0.1", "lr=0.5 scale.base_lr=0.1",
                                       "lr=0.5 scale.base_lr=0.2"]
