"""The ICS measurements inside `bnexp train`: outputs, TensorBoard tags, costs, noisy BN on/off."""

from __future__ import annotations

import json

import torch

from bnexp.config import compose_config
from bnexp.bn import NoisyBatchNorm
from bnexp.models import build_model
from bnexp.rundir import read_jsonl

from conftest import FAST


def test_train_with_all_ics_measurements(run_bnexp, tmp_path):
    run_dir = tmp_path / "run"
    r = run_bnexp("train", *FAST, "bn=noisy", "monitor.grad_ics=true", "monitor.landscape=true",
                  "monitor.grad_ics_every=100", "monitor.landscape_every=150", "trainer.max_steps=300",
                  "trainer.eval_every=100", "trainer.hist_every=100", f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "finished" and s["bn_noise"] is True
    assert set(s["probe_time_s"]) == {"eval", "monitor", "grad_ics", "landscape"}
    assert all(v > 0 for v in s["probe_time_s"].values())
    recs = read_jsonl(run_dir / "ics.jsonl")
    assert [r["step"] for r in recs if r["kind"] == "grad_ics"] == [100, 200, 300]
    assert [r["step"] for r in recs if r["kind"] == "landscape"] == [150, 300]
    g = next(r for r in recs if r["kind"] == "grad_ics")
    assert set(g["layers"]) == {"layer1", "layer2", "layer3", "classifier"}
    assert g["layers"]["layer1"]["l2"] == 0.0  # nothing precedes the first layer (Def. 2.1)
    assert g["layers"]["layer2"]["l2"] > 0.0
    shift = read_jsonl(run_dir / "shift.jsonl")
    first = shift[0]["shift_metrics"]["layer1"]
    assert first["w1_first"] == 0.0 and first["w1_prev"] == 0.0
    assert shift[-1]["shift_metrics"]["layer1"]["w1_first"] > 0.0

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    for tag in ("grad_ics/layer2/l2", "grad_ics/layer2/cos", "landscape/beta_smoothness",
                "landscape/loss_variation", "landscape/grad_predictiveness", "ics/layer1/w1_first",
                "ics/layer3/mean_shift_prev"):
        assert tag in tags, tag


def test_noisy_bn_switch_wraps_every_bn_layer_and_is_off_in_eval():
    cfg = compose_config(["bn=noisy"])
    model = build_model(cfg, (1, 28, 28), 10)
    noisy = [m for m in model.modules() if isinstance(m, NoisyBatchNorm)]
    assert len(noisy) == 3 and all((m.a, m.b, m.c, m.d) == (0.5, 1.25, 0.1, 0.1) for m in noisy)
    x = torch.rand(32, 1, 28, 28)
    model.eval()
    clean = build_model(compose_config(["bn=true"]), (1, 28, 28), 10)
    clean.load_state_dict({k.replace(".bn.bn.", ".bn."): v for k, v in model.state_dict().items()})
    clean.eval()
    assert torch.equal(model(x), clean(x))  # eval mode: no noise
    model.train()
    clean.train()
    assert not torch.allclose(model(x), clean(x))  # training: noise injected


def test_shift_metrics_can_be_switched_off(run_bnexp, tmp_path):
    run_dir = tmp_path / "off"
    r = run_bnexp("train", *FAST, "monitor.shift_metrics=false", "trainer.max_steps=50", "trainer.eval_every=50",
                  "trainer.hist_every=25", f"hydra.run.dir={run_dir}")
    assert r.returncode == 0, r.stderr
    assert all("shift_metrics" not in rec for rec in read_jsonl(run_dir / "shift.jsonl"))
    assert not (run_dir / "ics.jsonl").exists()
