"""The sweep scripts end to end on real data, shortened with extra overrides."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bnexp.rundir import read_jsonl

from conftest import REPO

REPORT_FILES = ("report.md", "report.csv", "report.json", "accuracy_vs_steps.png", "percentiles.png",
                "stability.png")


def _script(name: str, tmp_path: Path, data_root: Path, *overrides: str, **env_extra: str):
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), JOBS="2", **env_extra)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    return subprocess.run(["bash", str(REPO / "scripts" / name), *overrides], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)


def test_reproduce_mnist_small_sweep_writes_report(tmp_path, data_root):
    sweep = tmp_path / "mnist"
    r = _script("reproduce_mnist.sh", tmp_path, data_root, "trainer.max_steps=300", "seed=0", "lr=0.12",
                "trainer.eval_every=100", "trainer.hist_every=100", SWEEP_DIR=str(sweep))
    assert r.returncode == 0, r.stderr[-3000:]
    runs = sorted(p.parent.name for p in sweep.glob("*/summary.json"))
    assert len(runs) == 2 and {n.split(",")[0] for n in runs} == {"bn=true", "bn=false"}
    for f in REPORT_FILES:
        assert (sweep / f).stat().st_size > 0, f
    report = json.loads((sweep / "report.json").read_text())
    assert len(report["configurations"]) == 2
    assert "sweep wall time" in r.stdout
    # re-running completes only what is missing: nothing here
    r2 = _script("reproduce_mnist.sh", tmp_path, data_root, "trainer.max_steps=300", "seed=0", "lr=0.12",
                 "trainer.eval_every=100", "trainer.hist_every=100", SWEEP_DIR=str(sweep))
    assert r2.returncode == 0
    assert (r2.stdout + r2.stderr).count("skipped") == 2


def test_reproduce_cifar_two_stages_few_steps(tmp_path, data_root):
    """Stage 1 trains the baseline at every rate of the grid, stage 2 the other presets at multiples of
    the winner; the report has the matched-accuracy Sec. 4.2 section (few steps, one seed)."""
    sweep = tmp_path / "cifar"
    r = _script("reproduce_cifar.sh", tmp_path, data_root, "scale.baseline_steps=8", "scale.fast_steps=4",
                "scale.evals=1", "trainer.log_every=2", "trainer.probe_size=100",
                SWEEP_DIR=str(sweep), VERIFY_CHECKSUMS="false", SEEDS="0", LR_GRID="0.01,0.025,0.0625")
    assert r.returncode == 0, r.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
    base_lrs = sorted(s["lr"] for s in summaries if s["experiment"] == "baseline")
    assert base_lrs[:3] == [0.01, 0.025, 0.0625]
    best = float(r.stdout.split("multiples of the baseline's rate ")[1].split()[0])
    assert best in base_lrs
    others = {s["experiment"]: s for s in summaries if s["experiment"] != "baseline"}
    assert set(others) == {"bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid", "baseline_x5", "baseline_sigmoid"}
    mult = {"bn_baseline": 1, "bn_x5": 5, "bn_x30": 30, "bn_x5_sigmoid": 5, "baseline_x5": 5, "baseline_sigmoid": 1}
    for name, s in others.items():
        assert abs(s["lr"] - mult[name] * best) < 1e-9, name
        assert s["max_steps"] == (4 if name in ("bn_x5", "bn_x30", "bn_x5_sigmoid") else 8)
    md = (sweep / "report.md").read_text()
    assert "Sec. 4.2, matched accuracy" in md and "Pass rule" in md
    assert (sweep / "matched_accuracy.png").stat().st_size > 0
    assert "sweep wall time" in r.stdout


def yaml_scale(path) -> float:
    """bn.noise_scale of a run's resolved config.yaml."""
    import yaml

    return float(yaml.safe_load(path.read_text())["bn"]["noise_scale"])


def test_ics_study_few_steps(tmp_path, data_root):
    mnist, cifar = tmp_path / "ics_mnist", tmp_path / "ics_cifar"
    r = _script("ics_study.sh", tmp_path, data_root, "trainer.max_steps=40", "seed=0", "trainer.eval_every=20",
                "trainer.hist_every=20", "trainer.log_every=10", "monitor.grad_ics_every=20",
                "monitor.landscape_every=20", MNIST_DIR=str(mnist), CIFAR_DIR=str(cifar),
                VERIFY_CHECKSUMS="false", NOISE_SCALES="1,3")
    assert r.returncode == 0, r.stderr[-3000:]
    for sweep in (mnist, cifar):
        summaries = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
        assert sorted((s["bn"], s["bn_noise"]) for s in summaries) == [(False, False), (True, False), (True, True),
                                                                       (True, True)]
        scales = sorted(yaml_scale(p) for p in sweep.glob("*/config.yaml") if "noise: true" in p.read_text())
        assert scales == [1.0, 3.0]
        for p in sweep.glob("*/ics.jsonl"):
            kinds = [rec["kind"] for rec in read_jsonl(p)]
            assert kinds.count("grad_ics") == 2 and kinds.count("landscape") == 2
        assert all(s["probe_time_s"]["grad_ics"] > 0 for s in summaries)
        assert (sweep / "report.md").exists()
    assert "MNIST part" in r.stdout
