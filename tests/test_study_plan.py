"""scripts/study.sh and bnexp/designs/studies.py (docs/studies/): each design's run count against a hand count, run
folders against bnexp's own naming rule, the overrides compose into valid configs with the planned
values, the resumable choice of multiruns, the cost model's scheduling, and DRY_RUN of every study."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from bnexp.config.schema import BNConfig, compose_config, quote_bn_overrides, validate
from bnexp.runfolders.runnames import sweep_subdir
from bnexp.designs.studies import (STUDIES, CostModel, Job, build_studies, estimate, expand, makespan, pending_lines)

from conftest import REPO

# hand counts of stage 1 (the tuning grids on seeds 100-102) from docs/studies/PLAN.md
EXPECTED_RUNS = {"batch_size": 3 * (5 + 5 + 5 + 6 + 5) * 3 + 2 * 6 * 3,  # (BN, LN, none) x the m grids x 3 seeds
                                                                       # + 2 ghost sizes x the m = 60 grid x 3
                 "inference_statistics": (5 + 5 + 5 + 6 + 5) * 3,  # BN at momentum 0.1 on the m grids x 3 seeds
                 "placement": 2 * 2 * 2 * 5 * 3,           # model x act x position x 5 rates x 3 seeds
                 "normalizer": 4 * 10 * 3,                 # 4 normalizers x 10 rates x 3 seeds
                 "depth": 3 * 2 * 6 * 3}                   # 3 depths x (BN, none) x 6 rates x 3 seeds
# bn=layer|group, bn.groups and bn.position come with the normalizer study's keys
NORMS_MERGED = (REPO / "conf" / "bn" / "layer.yaml").exists() and "position" in {
    f.name for f in dataclasses.fields(BNConfig)}


def _needs_norms(overrides) -> bool:
    return any(o.startswith(("bn.position", "bn.groups", "bn=layer", "bn='layer'", "bn=group", "bn='group'"))
               for o in overrides)


def test_run_counts_and_unique_folders():
    studies = build_studies()
    assert tuple(studies) == STUDIES
    for name, n in EXPECTED_RUNS.items():
        jobs = expand(studies[name])
        assert len(jobs) == n, name
        assert len({j.folder for j in jobs}) == n, name


@pytest.mark.slow  # composes every job of the five two-stage designs (~10 s)
def test_folders_are_the_names_bnexp_gives_sweep_jobs(tmp_path):
    studies = build_studies()
    # hand-written: the first job of a study is named by its multirun's swept keys
    assert expand(studies["batch_size"])[0].folder == "m=2/bn=true,lr=0.15,seed=100"
    assert expand(studies["batch_size"])[-1].folder == "ghost,m=60/bn.ghost_batch_size=4,lr=14.4,seed=102"
    assert expand(studies["depth"])[0].folder == "depth=12/bn=true,lr=0.45,seed=100"
    assert expand(studies["normalizer"])[-1].folder == "bn=group,groups=4/lr=21.6,seed=102"
    # every job: bnexp.runfolders.runnames.sweep_subdir with the multirun.yaml Hydra writes for its multirun
    for name, study in studies.items():
        jobs = expand(study)
        for i, batch in enumerate(study.batches):
            d = tmp_path / name / str(i)
            d.mkdir(parents=True)
            task = quote_bn_overrides([o for o in batch.all_overrides() if not o.startswith("hydra.")])
            OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"task": task}}}), d / "multirun.yaml")
            for j in (j for j in jobs if j.batch == i):
                folder = sweep_subdir(str(d), list(j.overrides), "fallback")
                assert j.folder == (f"{batch.prefix}/{folder}" if batch.prefix else folder)


def _compose_first_and_last(norms: bool) -> int:
    """Compose and validate the first and last job of every multirun whose overrides need (``norms``) or
    do not need the bn=layer|group / bn.groups / bn.position keys; check the planned m and steps."""
    composed = 0
    for name, study in build_studies().items():
        jobs = expand(study)
        for i in range(len(study.batches)):
            mine = [j for j in jobs if j.batch == i]
            for j in (mine[0], mine[-1]):
                if _needs_norms(j.overrides) != norms:
                    continue
                cfg = compose_config(list(j.overrides))
                validate(cfg)
                assert (cfg.trainer.batch_size, cfg.trainer.max_steps) == (j.m, j.steps), (name, j.folder)
                composed += 1
    return composed


@pytest.mark.slow  # composes one job per batch of every study (~7 s)
def test_overrides_compose_to_the_planned_values():
    assert _compose_first_and_last(norms=False) >= 10
    studies = build_studies()
    # the fixed-examples rule by hand: 240,000 examples, an evaluation every 6,000 examples, the m's grid
    bs = expand(studies["batch_size"])
    first, last = bs[0], next(j for j in bs if j.m == 256)  # BN at m = 2 and at m = 256
    for job, lr, steps, every, hist in ((first, 0.15, 120_000, 3000, 30_000), (last, 1.8, 938, 23, 234)):
        cfg = compose_config(list(job.overrides))
        assert (cfg.lr, cfg.trainer.max_steps, cfg.trainer.eval_every, cfg.trainer.hist_every) == (
            pytest.approx(lr), steps, every, hist)
        assert cfg.bn.enabled and cfg.trainer.batch_size == job.m
    ghost = compose_config(list(bs[-1].overrides))
    assert (ghost.bn.ghost_batch_size, ghost.trainer.batch_size, ghost.trainer.max_steps) == (4, 60, 4000)
    deep = compose_config(list(expand(studies["depth"])[0].overrides))
    assert list(deep.model.hidden) == [100] * 12 and deep.bn.enabled and deep.lr == 0.45


@pytest.mark.slow  # reads or plans real sweep folders: over the fast tier's 2.5 s of CPU
@pytest.mark.skipif(not NORMS_MERGED, reason="bn=layer|group, bn.groups, bn.position: the normalizer study's keys")
def test_overrides_with_the_new_normalizer_keys_compose():
    assert _compose_first_and_last(norms=True) >= 10


def _finish(sweep, jobs, status="finished"):
    for j in jobs:
        (sweep / j.folder).mkdir(parents=True, exist_ok=True)
        (sweep / j.folder / "summary.json").write_text(json.dumps({"status": status}))


def test_a_second_call_starts_only_the_multiruns_with_runs_to_do(tmp_path):
    study = build_studies()["depth"]
    jobs = expand(study)
    assert len(pending_lines(study, tmp_path)) == 3
    _finish(tmp_path, [j for j in jobs if j.batch == 0])                   # 12 layers complete
    _finish(tmp_path, [j for j in jobs if j.batch == 1][:-1], "diverged")  # 6 layers: one run left
    _finish(tmp_path, [j for j in jobs if j.batch == 1][-1:], "interrupted")
    lines = pending_lines(study, tmp_path)
    assert len(lines) == 2 and "depth=6/" in lines[0] and "depth=3/" in lines[1]
    # stage 1's split after the batch's overrides, then the run-folder rule last
    assert lines[0].endswith("seed=100,101,102 data.validation=10000 " + lines[0].split(" ")[-1])
    assert estimate(study, 2, sweep_dir=tmp_path)["todo"] == 1 + 36
    _finish(tmp_path, [j for j in jobs if j.batch >= 1])
    assert pending_lines(study, tmp_path) == []
    # extra overrides: seed=0 is no longer swept, so the folders (and the runs) are others
    lines = pending_lines(study, tmp_path, ("seed=0",))
    assert len(lines) == 3 and all(line.endswith(" seed=0") for line in lines)


def test_cost_model_and_scheduling_by_hand():
    assert makespan([3, 3, 3], 2) == 6        # two at once, then the third
    assert makespan([4, 1, 1, 1, 1], 2) == 4  # the short ones fill the second worker
    assert makespan([], 2) == 0
    cost = CostModel()
    study = build_studies()["depth"]
    job3 = Job(0, (), "x", 60, 1000, 11)
    # 6 s start-up + 1,000 steps of (1.0 + 0.0133 * 60) ms + 11 evaluations of 0.07 s
    assert cost.job_seconds(job3, study.batches[2]) == pytest.approx(6 + 1.798 + 0.77)
    # 12 layers: half the per-step part x 13/4, the multiply-adds x 188,400 / 99,400
    ratio = (78400 + 11 * 10000 + 1000) / 99400
    assert cost.job_seconds(job3, study.batches[0]) == pytest.approx(
        6 + (1.0 * (0.5 + 0.5 * 13 / 4) + 0.0133 * 60 * ratio) + 11 * 0.07 * ratio)
    one = estimate(study, 1)
    assert one["seconds"] == pytest.approx(sum(cost.job_seconds(j, study.batches[j.batch]) for j in expand(study)))
    assert estimate(study, 2)["seconds"] < one["seconds"]


def _script(tmp_path, *args, timeout: float = 900, **env_extra):
    env = dict(os.environ, JOBS="2", **env_extra)
    env["PATH"] = str(sys.executable.rsplit("/", 1)[0]) + os.pathsep + env["PATH"]
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(["bash", str(REPO / "scripts" / "study.sh"), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_dry_run_of_every_study_prints_the_plan_and_trains_nothing(tmp_path):
    for name, n in EXPECTED_RUNS.items():
        sweep = tmp_path / name
        r = _script(tmp_path, name, DRY_RUN="1", SWEEP_DIR=str(sweep))
        assert r.returncode == 0, r.stderr[-2000:]
        assert f"total: {n} runs ({n} to do)" in r.stdout and "estimated wall time" in r.stdout
        assert "bnexp train -m" in r.stdout and not sweep.exists()
        # both stages: stage 2 (the evaluation seeds) estimated at its most before stage 1 has run
        assert "stage 1 (tuning seeds 100, 101, 102): every grid, read on the validation split " \
            "(data.validation=10000: 10,000 training images held out" in r.stdout
        assert "stage 2 (evaluation), trained on the full training set and scored on the test set " \
            "(data.validation=0): each configuration at its chosen rate(s) on the evaluation seeds 1000, 1001, 1002, " \
            "1003, 1004" in r.stdout and "both stages: " in r.stdout and "runs at most" in r.stdout
        # every planned command of stage 1 reads the validation split; stage 2's planned multiruns the test set
        printed = [line for line in r.stdout.splitlines() if line.startswith("$ ") and " train " in line]
        assert printed and all("data.validation=10000" in line.split() and "data.validation=0" not in line.split()
                               for line in printed)
        stage2 = [line for line in r.stdout.splitlines() if "seed=1000,1001,1002,1003,1004" in line.split()]
        assert stage2 and all("data.validation=0" in line.split() for line in stage2)
        assert "seed=0," not in r.stdout and "seed=0 " not in r.stdout
    r = _script(tmp_path, "nonsense", DRY_RUN="1")
    assert r.returncode == 2 and "usage: scripts/study.sh NAME" in r.stderr


def test_a_tiny_study_trains_reports_and_a_second_call_trains_nothing(tmp_path, data_root):
    """The depth study cut to 6 runs of 20 steps (one seed, one rate): real multiruns, run folders where the
    plan expects them, the report's study section; then the same call again. (An override of model.hidden
    would make the three depths one configuration, which the report rightly counts once per seed.)"""
    sweep = tmp_path / "depth"
    extra = ("trainer.max_steps=20", "trainer.eval_every=10", "seed=0", "lr=3.6")
    docs = REPO / "docs" / "studies" / "depth"  # the committed report: a run with extra overrides leaves it alone
    before = {str(f): f.read_bytes() for f in docs.rglob("*") if f.is_file()} if docs.is_dir() else {}
    r = _script(tmp_path, "depth", *extra, timeout=3000, SWEEP_DIR=str(sweep), BNEXP_DATA_ROOT=str(data_root))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    jobs = expand(build_studies()["depth"], extra)
    assert len(jobs) == 6 and all((sweep / j.folder / "summary.json").is_file() for j in jobs)
    assert {j.folder for j in jobs} == {f"depth={k}/bn={b}" for k in (3, 6, 12) for b in ("true", "false")}
    data = json.loads((sweep / "report.json").read_text())
    assert data["study"]["name"] == "depth" and data["study"]["runs"] == 6
    assert json.loads((sweep / "study.json").read_text())["wall_time_s"] > 0
    assert (sweep / "study_depth.png").is_file()
    assert ({str(f): f.read_bytes() for f in docs.rglob("*") if f.is_file()} if docs.is_dir() else {}) == before
    again = _script(tmp_path, "depth", *extra, timeout=1200, SWEEP_DIR=str(sweep), BNEXP_DATA_ROOT=str(data_root))
    assert again.returncode == 0 and "every run of" in again.stdout and "bnexp train" not in again.stderr


def test_script_and_readme_state_the_seeds_and_split_of_the_design():
    """scripts/study.sh's header and docs/studies/README.md name the design's own tuning and evaluation seeds and
    each stage's split (docs/studies/PLAN.md, second amendment), read from bnexp/designs/studies.py."""
    from bnexp.analysis.tuning import TUNING_SEEDS
    from bnexp.designs import studies

    span = lambda ss: f"{min(ss)}-{max(ss)}"  # noqa: E731
    ev = studies.EVALUATION_SEEDS
    assert list(ev) == list(range(min(ev), max(ev) + 1))  # a span names them all
    for path in ("scripts/study.sh", "docs/studies/README.md"):
        text = " ".join(" ".join(line.lstrip("#> ").split()) for line in (REPO / path).read_text().splitlines())
        assert f"tuning seeds {span(TUNING_SEEDS)}" in text, path
        assert f"data.validation={studies.VALIDATION}" in text and "data.validation=0" in text, path
        assert f"seeds {span(studies.EVALUATION_SEEDS)}" in text, path
