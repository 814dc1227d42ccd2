"""Cluster sweeps through hydra-submitit-launcher's submitit_local (no SLURM needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import FAST


def test_two_job_submitit_local_sweep_finishes(run_bnexp, tmp_path):
    sweep = tmp_path / "sweep"
    r = run_bnexp("train", "-m", "hydra/launcher=local", "seed=0,1", *FAST, "trainer.max_steps=40",
                  "trainer.eval_every=20", "trainer.hist_every=20", f"hydra.sweep.dir={sweep}", timeout=420)
    assert r.returncode == 0, r.stderr[-3000:]
    summaries = sorted(sweep.glob("*/summary.json"))
    assert [p.parent.name.split(",")[0] for p in summaries] == ["seed=0", "seed=1"]
    for p in summaries:
        s = json.loads(p.read_text())
        assert s["status"] == "finished" and s["step"] == 40
    # each run was its own submitit job (one job folder with a result pickle per run)
    results = sorted(sweep.glob(".submitit/*/*_result.pkl"))
    assert len(results) == 2
    # the two seeds trained differently, in separate processes
    accs = {json.loads(p.read_text())["final_test_accuracy"] for p in summaries}
    assert len(accs) == 2


def _records(path):
    """metrics.jsonl without the wall-clock field."""
    out = []
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        rec.pop("wall_time_s", None)
        out.append(rec)
    return out


def _signal_mid_run(exe: list[str], cwd: Path, env: dict, sweep: Path, steps: int, n_runs: int):
    """Start the sweep; once each of its ``n_runs`` runs has recorded step steps // 10 (training, 90% still to go),
    send the preemption signal (SIGUSR2) to the one process that trains them (the pid in each run folder's lock).
    Returns (exit code, output, True if the signal reached the runs before they ended)."""
    import signal
    import subprocess
    import time

    from bnexp.runfolders.rundir import read_jsonl

    job = subprocess.Popen(exe, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sent = False
    try:
        deadline = time.time() + 600
        while job.poll() is None and not sent and time.time() < deadline:
            metrics = list(sweep.glob("*/metrics.jsonl"))
            if len(metrics) == n_runs and all(any(r.get("step", 0) >= steps // 10 for r in read_jsonl(m))
                                              for m in metrics):
                locks = [m.parent / ".lock" for m in metrics]
                pids = {p.read_text().strip() if p.exists() else "" for p in locks}
                if len(pids) == 1 and (pid := pids.pop()).isdigit():  # one process holds every run (none ended)
                    os.kill(int(pid), signal.SIGUSR2)
                    sent = True
            time.sleep(0.05)
        out, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    return job.returncode, out, sent


def _sweep_signalled_mid_run(tmp_path: Path, env: dict, command, common: list[str], steps: int, n_runs: int):
    """Run ``command(run settings, sweep folder)`` and signal it mid-run (:func:`_signal_mid_run`); a sweep that
    ended before the signal could be sent is started again 4x longer, so the test assumes no speed of the
    machine. Returns (the run settings, the sweep folder, the steps, the sweep's output)."""
    for attempt in range(4):
        run = common + [f"trainer.max_steps={steps}", f"trainer.eval_every={steps // 10}",
                        f"trainer.hist_every={steps // 2}", f"trainer.ckpt_every={10 * steps}"]
        sweep = tmp_path / f"sweep{attempt}"
        code, out, sent = _signal_mid_run(command(run, sweep), tmp_path, env, sweep, steps, n_runs)
        assert code == 0, out[-3000:]
        if sent:
            return run, sweep, steps, out
        steps *= 4
    pytest.fail("every run ended before the signal could be sent")


def test_submitit_local_timeout_requeues_and_resumes_bit_identical(run_bnexp, tmp_path, data_root):
    """The preemption/timeout signal (SIGUSR2, which submitit_local sends signal_delay_s before timeout_min)
    mid-run: bnexp checkpoints that step, submitit requeues the job, the requeued job resumes from the
    checkpoint and ends bit-identical (CPU). The test sends the signal itself once the run is training, so it
    depends on no speed of the machine (a run that ended first is started again, 4x longer)."""
    import sys

    from bnexp.config.schema import compose_config
    from bnexp.train.trainer import train

    common = ["trainer.num_threads=1", "trainer.progress=false", "trainer.probe_size=200", "seed=3"]
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root))

    def command(run, sweep):
        return [sys.executable, "-m", "bnexp", "train", "-m", "hydra/launcher=local", "hydra.launcher.timeout_min=30",
                "+hydra.launcher.max_num_timeout=10", *run, f"hydra.sweep.dir={sweep}"]

    run, sweep, steps, _ = _sweep_signalled_mid_run(tmp_path, env, command, common, 2000, n_runs=1)
    reference = train(compose_config(run), tmp_path / "reference")  # uninterrupted
    assert reference["status"] == "finished" and reference["resumed_from_step"] is None
    (run_dir,) = [p.parent for p in sweep.glob("*/summary.json")]
    _requeued_and_bit_identical(run_dir, Path(reference["run_dir"]), steps, optimizer_too=True)


@pytest.mark.slow
def test_stacked_local_runs_each_stack_as_one_submitit_job(run_bnexp, tmp_path):
    """``hydra/launcher=stacked_local``: 4 runs in 2 stacks (bn=true, bn=false) are 2 submitit jobs, not 4; every
    run folder is an ordinary finished run."""
    sweep = tmp_path / "sweep"
    r = run_bnexp("train", "-m", "hydra/launcher=stacked_local", "seed=0,1", "bn=true,false", *FAST,
                  "trainer.max_steps=10", "trainer.eval_every=5", "trainer.hist_every=5", "trainer.probe_size=100",
                  f"hydra.sweep.dir={sweep}", timeout=420)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "4 jobs in 2 stacks" in r.stdout + r.stderr
    summaries = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/summary.json")}
    assert sorted(summaries) == ["bn=false,seed=0", "bn=false,seed=1", "bn=true,seed=0", "bn=true,seed=1"]
    assert all(s["status"] == "finished" and s["step"] == 10 for s in summaries.values())
    assert len(list(sweep.glob(".submitit/*/*_result.pkl"))) == 2  # one submitit job per stack


@pytest.mark.slow
def test_stacked_local_timeout_requeues_the_stack_and_resumes_every_run_bit_identical(tmp_path, data_root):
    """The preemption/timeout signal (SIGUSR2) while a stack of 2 runs trains as one submitit job: every run saves
    its checkpoint at that step (``interrupted``), submitit requeues the stack's job, the requeued job resumes both
    runs, and each ends bit-identical (CPU) to the same stack trained without interruption. The test sends the
    signal itself once both runs train, so it depends on no speed of the machine (a stack that ended first is
    started again, 4x longer)."""
    import sys

    from bnexp.config.schema import compose_config
    from bnexp.train.stack_loop import train_stack

    common = ["trainer.num_threads=1", "trainer.progress=false", "trainer.probe_size=200", "lr=0.5"]
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root))

    def command(run, sweep):
        return [sys.executable, "-m", "bnexp", "train", "-m", "hydra/launcher=stacked_local", "seed=0,1",
                "hydra.launcher.timeout_min=30", "hydra.launcher.max_num_timeout=10", *run, f"hydra.sweep.dir={sweep}"]

    run, sweep, steps, out = _sweep_signalled_mid_run(tmp_path, env, command, common, 1000, n_runs=2)
    assert "2 jobs in 1 stacks" in out
    assert len(list(sweep.glob(".submitit/*/*_result.pkl"))) == 1  # the stack was one submitit job
    reference = train_stack([(compose_config(run + [f"seed={s}"]), tmp_path / f"reference{s}", True) for s in (0, 1)])
    for seed, ref in zip((0, 1), reference):
        assert isinstance(ref, dict) and ref["status"] == "finished" and ref["resumed_from_step"] is None
        summary = _requeued_and_bit_identical(sweep / f"seed={seed}", Path(ref["run_dir"]), steps)
        assert summary["final_test_loss"] == ref["final_test_loss"]


@pytest.mark.parametrize("launcher, key, value, words", [
    ("stacked_local", "max_stack", "0", "hydra.launcher.max_stack=0: must be an integer >= 1"),
    ("stacked_slurm", "max_stack", "-3", "hydra.launcher.max_stack=-3: must be an integer >= 1"),
    ("stacked_local", "max_stack", "abc", "hydra.launcher.max_stack"),
    ("stacked_slurm", "executor", "pbs", "hydra.launcher.executor='pbs': must be one of slurm, local")])
def test_a_bad_stacked_submitit_key_is_one_line_and_exit_2(tmp_path, bnexp_main, launcher, key, value, words):
    """A bad key of ``hydra/launcher=stacked_slurm``/``stacked_local``: one line naming it, exit 2, nothing submitted."""
    sweep = tmp_path / "s"
    code, err, out = bnexp_main("train", "-m", "seed=0,1", *FAST, "trainer.max_steps=5", f"hydra/launcher={launcher}",
                                f"hydra.launcher.{key}={value}", f"hydra.sweep.dir={sweep}")
    assert code == 2
    assert words in err and "Traceback" not in err + out
    assert len([line for line in err.splitlines() if line.startswith("bnexp: error")]) == 1
    assert not list(sweep.glob(".submitit/*/*_submitted.pkl"))


def test_stacked_slurm_submits_each_stack_with_the_configs_sbatch_resources(tmp_path, monkeypatch):
    """The executor ``hydra/launcher=stacked_slurm`` builds from its shipped config (conf/hydra/launcher/
    stacked_slurm.yaml) writes the sbatch script of one stack with those resources, the requeue signal
    (USR2, signal_delay_s before the limit) and the job array's parallelism; an srun stands in for SLURM. Without
    srun the launcher says so in one line."""
    import yaml
    from omegaconf import OmegaConf

    from bnexp.errors import UserError
    from hydra_plugins.bnexp_stacked_launcher.stacked_submitit import StackedSlurmConf, StackedSubmititLauncher

    own = yaml.safe_load((Path(__file__).parents[1] / "conf/hydra/launcher/stacked_slurm.yaml").read_text())
    own.pop("defaults")
    cfg = OmegaConf.merge(OmegaConf.structured(StackedSlurmConf), own,
                          {"submitit_folder": str(tmp_path / "s/%j"), "name": "train", "partition": "gpu"})
    params = OmegaConf.to_container(cfg)
    params.pop("_target_")
    launcher = StackedSubmititLauncher(**params)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(UserError, match="needs SLURM.*stacked_local"):
        launcher._executor()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    executor = launcher._executor()
    assert executor._executor.max_num_timeout == own["max_num_timeout"] == 3
    script = executor._executor._make_submission_file_text("CMD", "uid")
    for line in ["#SBATCH --partition=gpu", f"#SBATCH --time={own['timeout_min']}",
                 f"#SBATCH --cpus-per-task={own['cpus_per_task']}", f"#SBATCH --mem={own['mem_gb']}GB",
                 f"#SBATCH --gpus-per-node={own['gpus_per_node']}", f"#SBATCH --signal=USR2@{own['signal_delay_s']}",
                 "#SBATCH --open-mode=append"]:
        assert line in script, line


def test_slurm_launcher_without_slurm_is_one_line_exit_2_and_leaves_no_sweep_folder(run_bnexp, tmp_path):
    """``hydra/launcher=slurm`` (docs/cluster.md's command) on a machine without SLURM (no srun on the PATH) is
    refused as ``stacked_slurm`` is: one line naming the launcher and hydra/launcher=local, exit 2, no
    traceback, and no sweep folder (the multirun.yaml Hydra saved is taken back)."""
    sweep, bare = tmp_path / "x", tmp_path / "bin"
    bare.mkdir()
    r = run_bnexp("train", "-m", "hydra/launcher=slurm", "bn=true,false", "trainer.max_steps=10",
                  f"hydra.sweep.dir={sweep}", env_extra={"PATH": str(bare)})
    assert r.returncode == 2, r.stderr[-3000:]
    lines = [line for line in (r.stderr + r.stdout).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("bnexp: error: hydra/launcher=slurm needs SLURM"), lines
    assert "no srun" in lines[0] and "hydra/launcher=local runs the same jobs here" in lines[0]
    assert not sweep.exists()


def test_slurm_launcher_is_the_plugins_with_its_keys_and_goes_on_where_srun_exists(tmp_path, monkeypatch):
    """conf/hydra/launcher/slurm.yaml names bnexp's SlurmLauncher, a subclass of hydra-submitit-launcher's (the
    same keys and submission); its SLURM check refuses only where srun is missing."""
    import yaml
    from hydra.utils import get_class
    from hydra_plugins.hydra_submitit_launcher import submitit_launcher

    from bnexp.errors import UserError
    from hydra_plugins.bnexp_stacked_launcher.slurm import require_srun

    own = yaml.safe_load((Path(__file__).parents[1] / "conf/hydra/launcher/slurm.yaml").read_text())
    assert own["defaults"][0] == "submitit_slurm"
    plugins = submitit_launcher.SlurmLauncher  # by name: Hydra's plugin scan may load the module a second time
    assert f"{plugins.__module__}.{plugins.__qualname__}" in [f"{c.__module__}.{c.__qualname__}"
                                                              for c in get_class(own["_target_"]).__mro__[1:]]
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    with pytest.raises(UserError, match="^L needs SLURM, and this machine has no srun; I$"):
        require_srun("L", "I")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    require_srun("L", "I")


def _requeued_and_bit_identical(run_dir: Path, reference_dir: Path, steps: int, optimizer_too: bool = False) -> dict:
    """Assert that the run in ``run_dir`` was signalled mid-run (SIGUSR2), requeued and resumed from the
    signal-time checkpoint (the only one: trainer.ckpt_every is beyond the run), and ends bit-identical to the
    uninterrupted run in ``reference_dir`` (weights, optionally the optimizer state, every metrics record, the
    final test accuracy); returns its summary."""
    import torch

    summary = json.loads((run_dir / "summary.json").read_text())
    log = (run_dir / "train.log").read_text()
    assert summary["status"] == "finished" and summary["step"] == steps
    assert "SIGUSR2 at step" in log and "Requeued job" in log
    first_signal_step = int(log.split("SIGUSR2 at step ")[1].split(":")[0])
    assert 0 < first_signal_step < steps
    assert f"resumed from the checkpoint at step {first_signal_step} " in log
    assert summary["resumed_from_step"] == first_signal_step
    a = torch.load(reference_dir / "checkpoint.pt", weights_only=False)
    b = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    if optimizer_too:
        for s_a, s_b in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
            assert all(torch.equal(s_a[k], s_b[k]) for k in s_a)
    assert _records(reference_dir / "metrics.jsonl") == _records(run_dir / "metrics.jsonl")
    reference = json.loads((reference_dir / "summary.json").read_text())
    assert summary["final_test_accuracy"] == reference["final_test_accuracy"]
    return summary
