"""The sweep scripts end to end on real data, shortened with extra overrides."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from bnexp.runfolders.rundir import read_jsonl

from conftest import REPO

REPORT_FILES = ("report.md", "report.csv", "report.json", "accuracy_vs_steps.png", "percentiles.png",
                "stability.png")


def _script(name: str, tmp_path: Path, data_root: Path, *overrides: str, **env_extra: str):
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root), JOBS="2")
    env.update(env_extra)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    return subprocess.run(["bash", str(REPO / "scripts" / name), *overrides], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)


def test_reproduce_mnist_small_sweep_writes_report(tmp_path, data_root):
    """The four blocks of the design (BN / no BN x normal / xavier init), cut to one rate and one seed; a second
    call trains nothing; DOCS_DIR receives the report."""
    sweep, docs = tmp_path / "mnist", tmp_path / "docs"
    args = ("trainer.max_steps=300", "seed=1", "lr=0.12", "trainer.eval_every=100", "trainer.hist_every=100")
    r = _script("reproduce_mnist.sh", tmp_path, data_root, *args, SWEEP_DIR=str(sweep), DOCS_DIR=str(docs))
    assert r.returncode == 0, r.stderr[-3000:]
    runs = sorted(p.parent.name for p in sweep.glob("*/summary.json"))
    assert runs == [f"bn={b},init={i},lr=0.12,seed=1" for b in ("false", "true") for i in ("normal", "xavier")]
    for f in REPORT_FILES:
        assert (sweep / f).stat().st_size > 0, f
        assert (docs / f).read_bytes() == (sweep / f).read_bytes(), f
    report = json.loads((sweep / "report.json").read_text())
    assert len(report["configurations"]) == 4
    assert {c["config"]["model.init"] for c in report["configurations"]} == {"normal", "xavier"}
    summary = json.loads((sweep / "bn=true,init=xavier,lr=0.12,seed=1" / "summary.json").read_text())
    assert summary["max_steps"] == 300 and summary["seed"] == 1
    assert "sweep wall time" in r.stdout
    # re-running completes only what is missing: nothing here
    r2 = _script("reproduce_mnist.sh", tmp_path, data_root, *args, SWEEP_DIR=str(sweep), DOCS_DIR="")
    assert r2.returncode == 0
    assert "block" not in r2.stdout and "sweep wall time" in r2.stdout  # every run complete: no block starts


def test_reproduce_mnist_dry_run_prints_the_design(tmp_path, data_root):
    """DRY_RUN=1 trains nothing: stage 1's 81 planned runs (4 blocks x their grids x the tuning seeds 100-102,
    not the pilot seed 0), stage 2 at most 3 rates x the 5 evaluation seeds per network, 30,000 steps each,
    the estimate from the stated idle speeds; a run already complete is marked done and leaves the estimate."""
    from bnexp.designs.mnist import BLOCKS, SEEDS, run_seconds

    sweep = tmp_path / "mnist"
    r = _script("reproduce_mnist.sh", tmp_path, data_root, SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert not sweep.exists()
    n = sum(len(b.rates) for b in BLOCKS) * len(SEEDS)
    assert n == 81 and f"141 runs of 30,000 steps, evaluation every 250 steps; to run: 141 runs, {141 * 30000:,} steps" \
        in r.stdout
    lines = r.stdout.splitlines()
    names = [s.strip() for s in lines if s.startswith("  bn=")]
    assert len(names) == 81 and len(set(names)) == 81 and all(n.split("seed=")[1] in ("100", "101", "102") for n in names)
    assert "  bn=false,init=normal,lr=1.8,seed=102" in lines and "  bn=true,init=xavier,lr=14.4,seed=100" in lines
    assert "  no BN, xavier init: 15 runs at most, 15 to run" in lines
    # the amendment of docs/mnist/PLAN.md: stage 1 on the validation split, stage 2 on test at seeds 1000-1004
    assert "stage 1 (tuning seeds 100, 101, 102): every rate of every grid, read on the validation split " \
           "(data.validation=10000" in r.stdout
    assert "on the fresh seeds 1000, 1001, 1002, 1003, 1004, trained on the full training set and scored on the " \
           "test set (data.validation=0)" in r.stdout
    commands = [s for s in lines if s.startswith("$ ")]
    assert len(commands) == 4 and all(" seed=100,101,102 " in c and " data.validation=10000 " in c for c in commands)
    # by hand: blocks of 24, 27, 15, 15 runs on 2 jobs = 12 + 14 + 8 + 8 waves, then stage 2: 4 x 15 runs = 8 waves each
    minutes = ((12 + 8 + 16) * (12 + 30000 / 290) + (14 + 8 + 16) * (12 + 30000 / 490)) / 60
    assert f"estimated wall time: {minutes:.0f} min with 2 parallel jobs, assuming an idle machine" in r.stdout
    assert run_seconds(True, 30000) == pytest.approx(12 + 30000 / 290)
    # a complete run is skipped by the real sweep, so the plan marks it and leaves it out
    done = sweep / "bn=true,init=normal,lr=7.2,seed=101"
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"status": "finished", "evaluated_on": "validation"}))
    r = _script("reproduce_mnist.sh", tmp_path, data_root, SWEEP_DIR=str(sweep), DRY_RUN="1", JOBS="1")
    assert "  bn=true,init=normal,lr=7.2,seed=101  (done)" in r.stdout.splitlines()
    assert "to run: 140 runs, 4,200,000 steps" in r.stdout
    # extra overrides narrow the plan as they narrow the sweep (the last of a key wins); a seed makes it one stage
    r = _script("reproduce_mnist.sh", tmp_path, data_root, "seed=5", "lr=1.2", "trainer.max_steps=900", DRY_RUN="1")
    assert "4 runs of 900 steps" in r.stdout and "  bn=false,init=xavier,lr=1.2,seed=5" in r.stdout.splitlines()
    assert "stage 2" not in r.stdout
    # evaluation seeds must be fresh
    r = _script("reproduce_mnist.sh", tmp_path, data_root, SWEEP_DIR=str(sweep), DRY_RUN="1", EVALUATION_SEEDS="0,101")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: EVALUATION_SEEDS: seed(s) 101 are tuning seeds (100, 101, 102); the evaluation needs fresh seeds"]


def test_reproduce_cifar_dry_run_prints_the_plan(tmp_path, data_root):
    """DRY_RUN=1 trains nothing: it prints the ladder's planned runs, total steps and wall-time estimate."""
    r = _script("reproduce_cifar.sh", tmp_path, data_root, SWEEP_DIR=str(tmp_path / "cifar"), DRY_RUN="1")
    assert r.returncode == 0, r.stderr[-3000:]
    # stage 1: 4 configurations x 2 seeds x 6k; the baseline at 3k, 12k, 24k (6k is the tuning winner's run);
    # the first rungs of bn_baseline (1.5k) and bn_x5 (375), 2 seeds each
    assert f"to run, always: 18 runs, {8 * 6000 + 2 * (3000 + 12000 + 24000) + 2 * (1500 + 375):,} steps" in r.stdout
    assert "48000" in r.stdout and "bn_x30" not in r.stdout
    assert not (tmp_path / "cifar").exists()
    r = _script("reproduce_cifar.sh", tmp_path, data_root, SWEEP_DIR=str(tmp_path / "cifar"), DRY_RUN="1",
                PRESETS="all", SCALE="gpu")
    assert r.returncode == 0 and "bn_x30" in r.stdout and "baseline_sigmoid" in r.stdout
    assert "160000" in r.stdout  # the GPU ladder: 5k .. 80k, + 160k


@pytest.mark.slow
def test_reproduce_cifar_tiny_ladder_end_to_end(tmp_path, data_root):
    """A toy ladder on real CIFAR-10 (budgets of 4-16 steps, a tiny network, one seed): the three stages, the
    frontier report copied into DOCS_DIR, and a second call that trains nothing."""
    sweep, docs = tmp_path / "cifar", tmp_path / "docs"
    # JOBS=1: joblib trains each batch's runs one after the other in the sweep's own process instead of
    # starting worker processes for every batch (parallel jobs: test_reproduce_mnist_small_sweep_writes_report)
    env = dict(SWEEP_DIR=str(sweep), DOCS_DIR=str(docs), VERIFY_CHECKSUMS="false", SEEDS="0", JOBS="1",
               LADDER="tune=16;lrs=0.025;dropouts=0,0.3;baseline=8,16;cap=32;early=16;bn_x5=4;bn_baseline=8")
    small = ("scale.channels=[4,8,8]", "scale.fc=16", "trainer.probe_size=100", "trainer.log_every=2")
    r = _script("reproduce_cifar.sh", tmp_path, data_root, *small, **env)
    assert r.returncode == 0, r.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
    runs = {(s["experiment"], s["max_steps"]) for s in summaries}
    assert {("baseline", 8), ("baseline", 16), ("bn_baseline", 8), ("bn_x5", 4)} <= runs
    assert len([s for s in summaries if s["experiment"] == "baseline" and s["max_steps"] == 16]) == 2  # tuning
    x5 = next(s for s in summaries if s["experiment"] == "bn_x5")
    assert abs(x5["lr"] - 5 * 0.025) < 1e-12
    report = json.loads((docs / "report.json").read_text())
    assert {r["preset"] for r in report["frontier"]} >= {"baseline", "bn_baseline", "bn_x5"}
    assert set(report["matched_accuracy"]) >= {"bn_baseline", "bn_x5"}
    assert (docs / "frontier.png").stat().st_size > 0
    assert "budget-accuracy frontier" in (docs / "report.md").read_text()
    assert "sweep wall time" in r.stdout and "stage 3" in r.stdout
    # the rule that stopped each ladder, printed and kept beside the report
    ladders = (docs / "ladders.txt").read_text()
    assert (sweep / "ladders.txt").read_text() == ladders
    for preset in ("baseline", "bn_x5", "bn_baseline"):
        assert f"  {preset}: stopped by " in ladders and f"  {preset}: stopped by " in r.stdout
    r2 = _script("reproduce_cifar.sh", tmp_path, data_root, *small, **env)
    assert r2.returncode == 0 and "stage 1:" not in r2.stdout and "stage 3:" not in r2.stdout  # nothing left


def resolved(path: Path, key: str):
    """The value of dotted ``key`` (e.g. bn.noise_scale) in a run's resolved config.yaml."""
    import yaml

    value = yaml.safe_load(path.read_text())
    for part in key.split("."):
        value = value[part]
    return value


def test_ics_study_few_steps(tmp_path, data_root):
    """The study's sweeps (BN / no BN, then noisy BN at two strengths; MNIST, then CIFAR-10 with
    CIFAR_OVERRIDES: the preset's network at 4-8 channels, and its BN / no BN at a constant rate), every probe
    twice, and both reports. JOBS=1: no
    joblib worker processes to start (a third less CPU time; parallel jobs: the MNIST reproduction's test)."""
    mnist, cifar = tmp_path / "ics_mnist", tmp_path / "ics_cifar"
    r = _script("ics_study.sh", tmp_path, data_root, "trainer.max_steps=20", "seed=0", "lr=0.12", "trainer.eval_every=20",
                "trainer.hist_every=10", "trainer.log_every=5", "monitor.grad_ics_every=10",
                "monitor.landscape_every=10", MNIST_DIR=str(mnist), CIFAR_DIR=str(cifar),
                VERIFY_CHECKSUMS="false", NOISE_SCALES="1,3", JOBS="1",
                CIFAR_OVERRIDES="scale.channels=[4,8,8] scale.fc=16 trainer.probe_size=100")
    assert r.returncode == 0, r.stderr[-3000:]
    for sweep in (mnist, cifar):
        summaries = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
        # CIFAR-10 also runs BN and no BN at a constant rate, in folders of their own (docs/ics/PLAN.md, amendment)
        constant = [(False, False), (True, False)] if sweep == cifar else []
        assert sorted((s["bn"], s["bn_noise"]) for s in summaries) == sorted(
            [(False, False), (True, False), (True, True), (True, True), *constant])
        assert len(list(sweep.glob("schedule=constant,*/summary.json"))) == len(constant)
        scales = sorted(float(resolved(p, "bn.noise_scale")) for p in sweep.glob("*/config.yaml")
                        if "noise: true" in p.read_text())
        assert scales == [1.0, 3.0]
        for p in sweep.glob("*/ics.jsonl"):
            kinds = [rec["kind"] for rec in read_jsonl(p)]
            assert kinds.count("grad_ics") == 2 and kinds.count("landscape") == 2
        assert all(s["probe_time_s"]["grad_ics"] > 0 for s in summaries)
        assert (sweep / "report.md").exists()
        # one seed: the advice repeats the script's two calls (multirun.yaml holds only the second)
        advice = json.loads((sweep / "report.json").read_text())["seed_advice"]
        assert " bn=true,false " in advice and " bn=noisy " in advice and " bn.noise_scale=1,3 " in advice, advice
    # CIFAR_OVERRIDES reach the CIFAR-10 part only
    assert {tuple(resolved(p, "model.channels")) for p in cifar.glob("*/config.yaml")} == {(4, 8, 8)}
    assert {resolved(p, "trainer.probe_size") for p in mnist.glob("*/config.yaml")} == {1000}
    assert "MNIST part" in r.stdout


def test_sweep_folders_named_after_extra_overrides_pass_through_hydra():
    """A sweep folder named by the orchestrator's suffix holds '=' and ',' (e.g. outputs/sweeps/ics_cifar+
    scale.baseline_steps=3000,monitor.grad_ics_every=500), which Hydra's override grammar refuses unquoted:
    every block passes hydra.sweep.dir through sweep_dir_override, whose override parses back to the same
    path (a single quote in a folder name included); a backslash or '$' is refused, naming the variable."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from bnexp.designs.preflight import sweep_suffix
    from bnexp.runfolders.runnames import sweep_dir_override
    from bnexp.errors import UserError

    suffix = sweep_suffix(["scale.baseline_steps=3000", "monitor.grad_ics_every=500", "lr=[0.1, 0.2]"])
    assert suffix == "+scale.baseline_steps=3000,monitor.grad_ics_every=500,lr=_0.1,_0.2_"
    for folder in (f"outputs/sweeps/ics_cifar{suffix}", "outputs/sweeps/it's mine, a=b"):
        parsed = OverridesParser.create().parse_overrides([sweep_dir_override(folder)])[0]
        assert (parsed.key_or_group, parsed.value()) == ("hydra.sweep.dir", folder)
    for bad in ("outputs/a\\b", "outputs/${x}"):
        with pytest.raises(UserError, match="MNIST_DIR"):
            sweep_dir_override(bad, "MNIST_DIR")
    for script in ("ics_study.sh", "reproduce_cifar.sh", "reproduce_mnist.sh", "study.sh", "reproduce_all.sh"):
        text = (REPO / "scripts" / script).read_text()
        assert "hydra.sweep.dir" not in text and "exec python -m bnexp.designs.orchestrate " in text, script
