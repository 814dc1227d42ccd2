"""The ICS measurements inside `bnexp train`: outputs, TensorBoard tags, costs, noisy BN on/off."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from bnexp.config.schema import compose_config
from bnexp.nets.bn import NoisyBatchNorm
from bnexp.nets.models import build_model
from bnexp.runfolders.rundir import read_jsonl


def test_train_with_all_ics_measurements(bnexp_train, tmp_path):
    run_dir = tmp_path / "run"
    _, s = bnexp_train(run_dir, "bn=noisy", "monitor.grad_ics=true", "monitor.landscape=true",
                       "monitor.grad_ics_every=100", "monitor.landscape_every=150", "trainer.max_steps=300",
                       "trainer.eval_every=100", "trainer.hist_every=100")
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
    assert g["layers"]["layer1"]["trivial"] is True and g["layers"]["layer2"]["trivial"] is False
    assert g["layers"]["layer2"]["l2_rel"] == pytest.approx(g["layers"]["layer2"]["l2"] / g["layers"]["layer2"]["g_norm"])
    l2 = g["layers"]["layer2"]  # per unit of movement of layer 1 over the same update (docs/ics/measurements.md)
    assert l2["move_rel"] > 0 and l2["l2_rel_per_move"] == pytest.approx(l2["l2_rel"] / l2["move_rel"])
    assert g["layers"]["layer1"]["move_rel"] is None  # NaN (no earlier layers), written as null
    land = next(r for r in recs if r["kind"] == "landscape")
    assert land["rel_step_sizes"] == [0.0, 0.005, 0.01, 0.02, 0.05, 0.1] and land["rel_beta_smoothness"] > 0
    # filter-normalized (Li et al. 2018): the same relative steps, per filter
    assert land["fn_step_sizes"] == land["rel_step_sizes"] and land["fn_beta_smoothness"] > 0
    assert len(land["fn_losses"]) == len(land["fn_random_losses"]) == 6 and land["fn_random_loss_variation"] > 0
    shift = read_jsonl(run_dir / "shift.jsonl")
    first = shift[0]["shift_metrics"]["layer1"]
    assert first["w1_first"] == 0.0 and first["w1_prev"] == 0.0 and first["ks_first"] == 0.0
    last = shift[-1]["shift_metrics"]["layer1"]
    assert last["w1_first"] > 0.0 and 0 < last["ks_first"] <= 1 and last["w1_rel_first"] > 0
    for rec in ("shift_metrics", "bn_input_shift_metrics"):  # floors: per layer, per record, both captures
        assert all(set(v) >= {"w1_floor", "w1_rel_floor", "ks_floor", "w1_rel_prev", "ks_prev"}
                   for r in shift for v in r[rec].values())

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    ea.Reload()
    tags = set(ea.Tags()["scalars"])
    assert not any(t.startswith("grad_ics/layer1/") for t in tags)  # trivial by definition: not plotted
    for tag in ("grad_ics/layer2/l2", "grad_ics/layer2/l2_rel", "grad_ics/layer2/cos", "landscape/beta_smoothness",
                "landscape_rel/beta_smoothness", "bn_input/layer1/p50", "ics_bn_input/layer1/w1_first",
                "landscape/loss_variation", "landscape/grad_predictiveness", "ics/layer1/w1_first",
                "ics/layer3/mean_shift_prev", "ics/layer1/ks_first", "ics/layer1/w1_rel_first", "ics/layer1/ks_floor",
                "ics_bn_input/layer1/ks_first", "grad_ics/layer2/l2_rel_per_move", "grad_ics/layer2/move_rel",
                "landscape_fn/beta_smoothness", "landscape_fn/random_loss_variation"):
        assert tag in tags, tag


def test_noisy_bn_switch_wraps_every_bn_layer_and_is_off_in_eval():
    cfg = compose_config(["bn=noisy"])
    model = build_model(cfg, (1, 28, 28), 10)
    noisy = [m for m in model.modules() if isinstance(m, NoisyBatchNorm)]
    assert len(noisy) == 3 and all((m.a, m.b, m.c, m.d) == (0.5, 1.25, 0.1, 0.1) for m in noisy)
    x = torch.rand(32, 1, 28, 28)
    model.eval()
    clean = build_model(compose_config(["bn=true"]), (1, 28, 28), 10)
    scale = noisy[0].expected_scale  # eval: E[s] * (gamma x_hat + beta) + E[m], E[m] = 0
    assert scale == pytest.approx((1 + 1.25) / 2) and noisy[0].expected_shift == 0
    clean.load_state_dict({k.replace(".bn.bn.", ".bn."): v * scale if ".bn.bn.weight" in k or ".bn.bn.bias" in k
                           else v for k, v in model.state_dict().items()})
    clean.eval()
    assert torch.allclose(model(x), clean(x), atol=1e-6)  # eval mode: the noise's expectation, no noise
    model.train()
    clean.train()
    assert not torch.allclose(model(x), clean(x))  # training: noise injected


def test_shift_metrics_can_be_switched_off(bnexp_train, tmp_path):
    run_dir = tmp_path / "off"
    bnexp_train(run_dir, "monitor.shift_metrics=false", "trainer.max_steps=50", "trainer.eval_every=50",
                "trainer.hist_every=25")
    assert all("shift_metrics" not in rec for rec in read_jsonl(run_dir / "shift.jsonl"))
    assert not (run_dir / "ics.jsonl").exists()


@pytest.mark.slow  # four 24-step MNIST runs in this process (~13 s of CPU)
def test_noisy_bn_run_is_identical_whatever_the_monitoring(tmp_path, data_root, monkeypatch):
    """The monitor (every bn_stats mode) and the gradient-ICS and landscape probes never draw from
    the training noise: a noisy-BN run gives the same weights with hist_every=1 and all probes on
    as with hist_every=max_steps and the probes off."""
    from bnexp.train.trainer import Trainer

    monkeypatch.setenv("BNEXP_DATA_ROOT", str(data_root))
    base = ["bn=noisy", "bn.noise_scale=3", "trainer.max_steps=24", "trainer.eval_every=12",
            "trainer.progress=false", "trainer.num_threads=1", "trainer.save_checkpoint=false",
            "trainer.probe_size=200"]
    variants = {
        "quiet": ["trainer.hist_every=24"],
        "busy": ["trainer.hist_every=1", "monitor.grad_ics=true", "monitor.grad_ics_every=5",
                 "monitor.landscape=true", "monitor.landscape_every=7"],
        "population": ["trainer.hist_every=3", "monitor.bn_stats=population"],
        "probe": ["trainer.hist_every=2", "monitor.bn_stats=probe"],
    }
    finals = {}
    for name, extra in variants.items():
        trainer = Trainer(compose_config(base + extra), tmp_path / name)
        summary = trainer.run()
        assert summary["status"] == "finished"
        finals[name] = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    ref = finals.pop("quiet")
    for name, state in finals.items():
        for k in ref:
            assert torch.equal(ref[k], state[k]), (name, k)


def test_noise_scale_multiplies_the_spread():
    layers = {}
    for k in (0.0, 1.0, 3.0):
        cfg = compose_config(["bn=noisy", f"bn.noise_scale={k}"])
        layers[k] = [m for m in build_model(cfg, (1, 28, 28), 10).modules() if isinstance(m, NoisyBatchNorm)]
    base = layers[1.0][0]
    for k in (0.0, 3.0):
        m = layers[k][0]
        assert (m.a, m.b - 1, m.c, m.d) == pytest.approx((k * base.a, k * (base.b - 1), k * base.c, k * base.d))
    # strength 0 is plain BN in training too: s = 1, m = 0 exactly
    m = layers[0.0][0].train()
    x = torch.randn(16, m.bn.num_features)
    assert torch.equal(m(x), nn.functional.batch_norm(x, None, None, m.bn.weight, m.bn.bias, training=True,
                                                      eps=m.bn.eps))
