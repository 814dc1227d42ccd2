"""The main job end to end on real MNIST at the paper's full Fig. 1 setup (50,000 steps).

Both runs (BN and no BN) go as one Hydra multirun through the joblib launcher, one
job per core, so the pair takes about as long as one run (~1-2 minutes on 2 cores).
"""

from __future__ import annotations

import json

import pytest

from bnexp.runfolders.rundir import read_jsonl


@pytest.mark.slow
def test_full_default_runs_bn_beats_no_bn(run_bnexp, tmp_path):
    sweep = tmp_path / "paper"
    r = run_bnexp("train", "-m", "bn=true,false", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
                  "trainer.num_threads=1", "trainer.progress=false", f"hydra.sweep.dir={sweep}", timeout=1500)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = {}
    for p in sweep.glob("*/summary.json"):
        s = json.loads(p.read_text())
        runs[s["bn"]] = (s, read_jsonl(p.parent / "metrics.jsonl"))
    assert set(runs) == {True, False}
    bn, _ = runs[True]
    plain, plain_metrics = runs[False]
    for s in (bn, plain):
        assert s["status"] == "finished" and s["step"] == 50_000
    # The acceptance numbers of the Fig. 1 reproduction: BN >= 97.5%, plain >= 94%, and BN reaches 95% first.
    assert bn["final_test_accuracy"] >= 0.975, bn
    assert plain["final_test_accuracy"] >= 0.94, plain
    assert bn["steps_to_target"]["0.95"] is not None
    plain_95 = plain["steps_to_target"]["0.95"]
    assert plain_95 is None or bn["steps_to_target"]["0.95"] < plain_95
    assert plain_metrics[-1]["step"] == 50_000
