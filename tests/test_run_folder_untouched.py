"""Nothing is written into a run folder -- its ``.hydra/`` and ``train.log`` included -- before bnexp has
decided to train there (docs/reliability.md, "One config per run folder"): a second ``bnexp train`` that
is refused (another config, a foreign checkpoint, a folder in use, bad input) leaves every byte of the
folder as it was, and its summary.json keeps the status it had. A run that does start writes Hydra's
three files, as Hydra would have.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bnexp.runfolders import rundir

from conftest import SHORT_RUN

BASE = [*SHORT_RUN, "seed=3"]

pytestmark = pytest.mark.e2e  # each test trains one or two short runs in this process


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (relative path -> its bytes)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _train(bnexp_main, run_dir: Path, *extra: str):
    return bnexp_main("train", *BASE, *extra, f"hydra.run.dir={run_dir}")


def test_a_started_run_has_hydras_files_as_hydra_writes_them(bnexp_main, tmp_path):
    run_dir = tmp_path / "run"
    code, err, _ = _train(bnexp_main, run_dir, "lr=0.5")
    assert code == 0, err
    hydra = run_dir / ".hydra"
    assert sorted(p.name for p in hydra.iterdir()) == ["config.yaml", "hydra.yaml", "overrides.yaml"]
    assert yaml.safe_load((hydra / "config.yaml").read_text())["lr"] == 0.5
    assert yaml.safe_load((hydra / "overrides.yaml").read_text()) == [*BASE, "lr=0.5"]
    hydra_yaml = yaml.safe_load((hydra / "hydra.yaml").read_text())["hydra"]
    assert hydra_yaml["output_subdir"] == ".hydra"  # what the user asked for, not the held-back null
    assert hydra_yaml["job"]["env_set"] == {}
    assert hydra_yaml["overrides"]["hydra"] == [f"hydra.run.dir={run_dir}", "hydra.mode=RUN"]
    assert "data: mnist" in (run_dir / "train.log").read_text()  # records from before the decision kept


def test_a_users_output_subdir_is_kept(bnexp_main, tmp_path):
    run_dir = tmp_path / "run"
    code, err, _ = _train(bnexp_main, run_dir, "hydra.output_subdir=meta")
    assert code == 0, err
    assert not (run_dir / ".hydra").exists()
    assert yaml.safe_load((run_dir / "meta" / "hydra.yaml").read_text())["hydra"]["output_subdir"] == "meta"
    run2 = tmp_path / "run2"
    code, err, _ = _train(bnexp_main, run2, "hydra.output_subdir=null")
    assert code == 0, err
    assert not (run2 / ".hydra").exists() and (run2 / "summary.json").exists()


def test_another_config_in_a_finished_folder_changes_nothing(bnexp_main, tmp_path):
    run_dir = tmp_path / "run"
    assert _train(bnexp_main, run_dir, "lr=0.5")[0] == 0
    before = snapshot(run_dir)
    code, err, _ = _train(bnexp_main, run_dir, "lr=0.12")
    assert code == 2 and "lr: 0.5 there, 0.12 now" in err
    assert snapshot(run_dir) == before  # .hydra/config.yaml still says lr=0.5, train.log has no new line


def test_a_folder_in_use_changes_nothing(bnexp_main, tmp_path):
    run_dir = tmp_path / "run"
    assert _train(bnexp_main, run_dir, "lr=0.5")[0] == 0
    s = rundir.read_summary(run_dir)
    rundir.write_summary(run_dir, {**s, "status": "interrupted"})  # resumable: a second run would train
    other = rundir.RunLock(run_dir)  # another process training there (a flock of another open file)
    assert other.acquire()
    try:
        before = snapshot(run_dir)
        code, err, _ = _train(bnexp_main, run_dir, "lr=0.5")
        assert code == 2 and "in use by another bnexp process" in err
        assert snapshot(run_dir) == before
    finally:
        other.release()


def test_a_foreign_checkpoint_is_refused_before_anything_changes(bnexp_main, tmp_path):
    """The folder's config.yaml is gone, so only the checkpoint tells whose run it is: refused with
    one line, summary.json keeps ``interrupted`` (it used to be rewritten) and nothing else moves."""
    run_dir = tmp_path / "run"
    assert _train(bnexp_main, run_dir, "lr=0.5")[0] == 0
    s = rundir.read_summary(run_dir)
    rundir.write_summary(run_dir, {**s, "status": "interrupted"})
    (run_dir / "config.yaml").unlink()
    before = snapshot(run_dir)
    code, err, _ = _train(bnexp_main, run_dir, "lr=0.12")
    assert code == 2
    assert err.count("bnexp: error:") == 1 and "belongs to a run with a different config (differs in: lr)" in err
    assert "Traceback" not in err
    assert snapshot(run_dir) == before
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"


def test_bad_data_refuses_a_resumable_folder_without_touching_it(bnexp_main, tmp_path):
    run_dir = tmp_path / "run"
    assert _train(bnexp_main, run_dir)[0] == 0
    s = rundir.read_summary(run_dir)
    rundir.write_summary(run_dir, {**s, "status": "interrupted"})
    before = snapshot(run_dir)
    code, err, _ = _train(bnexp_main, run_dir, f"data.root={tmp_path / 'nothing'}")
    assert code == 2 and "MNIST not found" in err
    assert snapshot(run_dir) == before


def test_a_resumed_run_removes_temporary_files_of_an_attempt_cut_short(bnexp_main, tmp_path):
    run_dir = tmp_path / "run"
    assert _train(bnexp_main, run_dir)[0] == 0
    # the folder as a process killed while writing its summary and checkpoint leaves it
    rundir.write_summary(run_dir, {**rundir.read_summary(run_dir), "status": "running"})
    (run_dir / ".checkpoint.pt.x1y2z3.tmp").write_bytes(b"half a checkpoint")
    (run_dir / ".summary.json.a1b2c3.tmp").write_bytes(b"{")
    code, err, _ = _train(bnexp_main, run_dir)
    assert code == 0, err
    summary = rundir.read_summary(run_dir)
    assert summary["status"] == "finished" and summary["resumed_from_step"] == 20
    assert not list(run_dir.glob(".*.tmp"))


def test_a_sweep_job_refused_in_its_folder_changes_nothing(bnexp_main, tmp_path):
    """The same for sweep jobs: Hydra makes each job's folder (named by the swept key) and would write
    its .hydra/ before the job decides; the job folders of an earlier sweep with another
    trainer.max_steps keep every byte."""
    sweep = tmp_path / "sweep"
    code, err, _ = bnexp_main("train", "-m", *BASE, "lr=0.5,0.6", f"hydra.sweep.dir={sweep}")
    assert code == 0, err
    jobs = sorted(d for d in sweep.iterdir() if d.is_dir())
    assert [d.name for d in jobs] == ["lr=0.5", "lr=0.6"]
    assert yaml.safe_load((jobs[0] / ".hydra" / "config.yaml").read_text())["lr"] == 0.5
    before = {d.name: snapshot(d) for d in jobs}
    args = [o if not o.startswith("trainer.max_steps=") else "trainer.max_steps=30" for o in BASE]
    code, err, _ = bnexp_main("train", "-m", *args, "lr=0.5,0.6", f"hydra.sweep.dir={sweep}")
    assert code == 1 and err.count("trainer.max_steps: 20 there, 30 now") >= 2  # both jobs refused, listed
    assert {d.name: snapshot(d) for d in jobs} == before


@pytest.mark.parametrize("launcher", ["basic", "stacked"])
def test_a_sweep_folder_named_by_an_interpolation_gets_hydras_files(bnexp_main, tmp_path, launcher):
    """The sweep scripts name job folders with interpolations of the task's config
    (``hydra.sweep.subdir='init=${model.init},seed=${seed}'``); Hydra's files of such a job are written
    as given, unresolved (resolving them against Hydra's own config, which has no ``model``, failed every job)."""
    sweep = tmp_path / "sweep"
    subdir = "hydra.sweep.subdir='init=${model.init},seed=${seed}'"
    code, err, _ = bnexp_main("train", "-m", *SHORT_RUN, "seed=3,4", f"hydra/launcher={launcher}", subdir,
                              f"hydra.sweep.dir={sweep}")
    assert code == 0, err
    for seed in (3, 4):
        hydra = sweep / f"init=normal,seed={seed}" / ".hydra"
        assert yaml.safe_load((hydra / "config.yaml").read_text())["seed"] == seed
        assert subdir in yaml.safe_load((hydra / "hydra.yaml").read_text())["hydra"]["overrides"]["hydra"]
