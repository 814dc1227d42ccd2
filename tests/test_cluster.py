"""Cluster sweeps through hydra-submitit-launcher's submitit_local (no SLURM needed)."""

from __future__ import annotations

import json

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
