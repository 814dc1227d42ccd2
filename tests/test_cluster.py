"""Cluster sweeps through hydra-submitit-launcher's submitit_local (no SLURM needed)."""

from __future__ import annotations

import json
import os
from pathlib import Path

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


def _signal_mid_run(exe: list[str], cwd: Path, env: dict, sweep: Path, steps: int):
    """Start the sweep; once its run has recorded step steps // 10 (it is training, 90% of the run still to go),
    send the preemption signal (SIGUSR2) to the process that trains (the pid in the run folder's lock).
    Returns (the sweep's output, True if the signal reached the run before it ended)."""
    import signal
    import subprocess
    import time

    from bnexp.runfolders.rundir import read_jsonl

    job = subprocess.Popen(exe, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sent = False
    try:
        deadline = time.time() + 600
        while job.poll() is None and not sent and time.time() < deadline:
            for metrics in sweep.glob("*/metrics.jsonl"):
                if any(r.get("step", 0) >= steps // 10 for r in read_jsonl(metrics)):
                    pid = (metrics.parent / ".lock").read_text().strip() if (metrics.parent / ".lock").exists() else ""
                    if pid.isdigit():  # (a run that ended has released its lock)
                        os.kill(int(pid), signal.SIGUSR2)
                        sent = True
            time.sleep(0.05)
        out, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    return job.returncode, out, sent


def test_submitit_local_timeout_requeues_and_resumes_bit_identical(run_bnexp, tmp_path, data_root):
    """The preemption/timeout signal (SIGUSR2, which submitit_local sends signal_delay_s before timeout_min)
    mid-run: bnexp checkpoints that step, submitit requeues the job, the requeued job resumes from the
    checkpoint and ends bit-identical (CPU). The test sends the signal itself once the run is training, so it
    depends on no speed of the machine (a run that ended first is started again, 4x longer)."""
    import sys

    import torch

    from bnexp.config.schema import compose_config
    from bnexp.train.trainer import train

    common = ["trainer.num_threads=1", "trainer.progress=false", "trainer.probe_size=200", "seed=3"]
    env = dict(os.environ, BNEXP_DATA_ROOT=str(data_root))
    steps = 2000
    for attempt in range(4):
        run = common + [f"trainer.max_steps={steps}", f"trainer.eval_every={steps // 10}",
                        f"trainer.hist_every={steps // 2}", f"trainer.ckpt_every={10 * steps}"]
        sweep = tmp_path / f"sweep{attempt}"
        exe = [sys.executable, "-m", "bnexp", "train", "-m", "hydra/launcher=local", "hydra.launcher.timeout_min=30",
               "+hydra.launcher.max_num_timeout=10", *run, f"hydra.sweep.dir={sweep}"]
        code, out, sent = _signal_mid_run(exe, tmp_path, env, sweep, steps)
        assert code == 0, out[-3000:]
        if sent:
            break
        steps *= 4
    assert sent, "every run ended before the signal could be sent"
    reference = train(compose_config(run), tmp_path / "reference")  # uninterrupted
    assert reference["status"] == "finished" and reference["resumed_from_step"] is None
    (run_dir,) = [p.parent for p in sweep.glob("*/summary.json")]
    summary = json.loads((run_dir / "summary.json").read_text())
    log = (run_dir / "train.log").read_text()
    # it was signalled mid-run, requeued, and resumed from the signal-time checkpoint (the only one:
    # trainer.ckpt_every is beyond the run)
    assert summary["status"] == "finished" and summary["step"] == steps
    assert "SIGUSR2 at step" in log and "Requeued job" in log
    first_signal_step = int(log.split("SIGUSR2 at step ")[1].split(":")[0])
    assert 0 < first_signal_step < steps
    assert f"resumed from the checkpoint at step {first_signal_step} " in log
    assert 0 < summary["resumed_from_step"] < steps
    # bit-identical to the uninterrupted run
    a = torch.load(reference["run_dir"] + "/checkpoint.pt", weights_only=False)
    b = torch.load(run_dir / "checkpoint.pt", weights_only=False)
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    for s_a, s_b in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert all(torch.equal(s_a[k], s_b[k]) for k in s_a)
    assert _records(Path(reference["run_dir"]) / "metrics.jsonl") == _records(run_dir / "metrics.jsonl")
    assert summary["final_test_accuracy"] == reference["final_test_accuracy"]
