"""The shift monitor's BN statistics modes, the BN-input records, and noisy BN's untouched noise.

Expectations come from the BN formulas (Alg. 1 and 2, written out here with plain tensor
algebra) and from the affine map Wu, not from the monitor's own code."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bnexp.nets.bn import NoisyBatchNorm
from bnexp.train.ics import per_unit_wasserstein1, unit_moments
from bnexp.nets.models import MLP, CNN
from bnexp.train.monitor import ShiftMonitor

torch.set_num_threads(1)


def _bn_mlp(noise=False, eps=1e-12, seed=0):
    torch.manual_seed(seed)
    cfg = SimpleNamespace(enabled=True, eps=eps, momentum=0.1, impl="torch", noise=noise,
                          noise_a=0.5, noise_b=1.25, noise_c=0.1, noise_d=0.1, noise_scale=1.0)
    model = MLP(20, [8, 6], 3, "sigmoid", cfg, init_std=0.5).double()
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, m in model.named_modules():
            if isinstance(m, nn.BatchNorm1d):
                m.weight.copy_(0.5 + torch.rand(m.weight.shape, generator=gen, dtype=torch.float64))  # gamma
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen, dtype=torch.float64))  # beta
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen, dtype=torch.float64))
                m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen, dtype=torch.float64))
    probe = torch.randn(130, 20, generator=gen, dtype=torch.float64)
    return model, probe


def _bns(model):
    return [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]


def _monitor(model, probe, mode, batch_size=30):
    return ShiftMonitor(model, probe, [15, 50, 85], histograms=False, bn_stats=mode, batch_size=batch_size)


def test_probe_mode_reproduces_gamma_beta_population_mode_does_not():
    model, probe = _bn_mlp()
    bns = _bns(model)
    acts = {mode: _monitor(model, probe, mode).capture() for mode in ("probe", "batch", "population")}
    for i, bn in enumerate(bns):
        name = f"layer{i + 1}"
        gamma, beta = bn.weight.detach(), bn.bias.detach()
        mean, std = unit_moments(acts["probe"][name])
        assert torch.allclose(mean, beta, atol=1e-9) and torch.allclose(std, gamma, atol=1e-6)
        # population mode: not pinned to gamma, beta ...
        pm, ps = unit_moments(acts["population"][name])
        assert (pm - beta).abs().max() > 0.05 and (ps - gamma).abs().max() > 0.05
        # ... but Alg. 2's inference map of the BN input: gamma (x - E[x]) / sqrt(Var[x] + eps) + beta
        bn_in = _monitor(model, probe, "population").capture_all()[1][name]
        expected = gamma * (bn_in - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) + beta
        assert torch.allclose(acts["population"][name], expected, atol=1e-12)
    # batch mode: 130 images in mini-batches of 30 -> the first 120, each mini-batch normalized by
    # its own statistics, so every mini-batch (and hence their union) has per-unit mean beta and
    # std gamma too -- a property of BN, not of the monitor -- while each image's value depends on
    # the other images of its mini-batch and differs from probe mode's.
    for i, bn in enumerate(bns):
        name = f"layer{i + 1}"
        b = acts["batch"][name]
        assert b.shape[0] == 120
        for k in range(4):
            cm, cs = unit_moments(b[30 * k:30 * (k + 1)])
            assert torch.allclose(cm, bn.bias.detach(), atol=1e-9)
            assert torch.allclose(cs, bn.weight.detach(), atol=1e-6)
        assert per_unit_wasserstein1(b, acts["probe"][name][:120]) > 1e-3


def test_modes_leave_running_averages_and_training_flag_alone():
    model, probe = _bn_mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.train()
    for mode in ("probe", "batch", "population"):
        _monitor(model, probe, mode).record(0)
    assert model.training and all(m.training for m in model.modules())
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("mode", ["batch", "population", "probe"])
def test_bn_input_is_wu_of_the_layer_input(mode):
    model, probe = _bn_mlp()
    mon = _monitor(model, probe, mode)
    acts, bn_in = mon.capture_all()
    n = acts["layer1"].shape[0]
    w1 = model.hidden[0].affine.weight.detach()
    w2 = model.hidden[1].affine.weight.detach()
    assert torch.allclose(bn_in["layer1"], probe[:n] @ w1.T, atol=1e-12)
    # layer 2's input is g(layer 1's pre-activation), g = sigmoid
    assert torch.allclose(bn_in["layer2"], torch.sigmoid(acts["layer1"]) @ w2.T, atol=1e-12)
    rec = mon.record(0)
    assert rec["bn_stats"] == mode
    assert set(rec["bn_input"]) == {"layer1", "layer2"} and set(rec["bn_input"]["layer1"]) == set(
        rec["layers"]["layer1"])
    assert rec["bn_input"]["layer1"]["mean"] == pytest.approx(float((probe[:n] @ w1.T).mean()), rel=1e-6)
    assert set(rec["bn_input_shift_metrics"]) == {"layer1", "layer2"}


def test_no_bn_network_has_no_bn_input_and_conv_bn_input():
    torch.manual_seed(0)
    plain = MLP(20, [8], 3, "sigmoid", None)
    rec = ShiftMonitor(plain, torch.randn(50, 20), [15, 50, 85], histograms=False).record(0)
    assert "bn_input" not in rec and "layer1" in rec["layers"]
    cfg = SimpleNamespace(enabled=True, eps=1e-5, momentum=0.1, impl="torch", noise=False)
    cnn = CNN((1, 8, 8), [4], 1, 6, 3, "relu", cfg)
    x = torch.randn(10, 1, 8, 8)
    _, bn_in = ShiftMonitor(cnn, x, [15, 50, 85], histograms=False, bn_stats="probe").capture_all()
    conv = cnn.features[0].affine
    assert torch.allclose(bn_in["layer1"], nn.functional.conv2d(x, conv.weight, padding=1), atol=1e-5)


def test_monitor_leaves_the_noise_generator_untouched():
    model, probe = _bn_mlp(noise=True)
    noisy = [m for m in model.modules() if isinstance(m, NoisyBatchNorm)]
    model.train()
    model(probe[:30])  # create the generators
    states = [m.noise_state()["state"].clone() for m in noisy]
    for mode in ("batch", "probe", "population"):
        _monitor(model, probe, mode).record(0)
    assert all(torch.equal(s, m.noise_state()["state"]) for s, m in zip(states, noisy))
    # batch/probe modes do show the noise: per-unit moments are no longer gamma, beta
    acts = _monitor(model, probe, "probe").capture()
    mean, _ = unit_moments(acts["layer1"])
    assert (mean - noisy[0].bn.bias.detach()).abs().max() > 0.01


def test_unknown_mode_is_refused():
    model, probe = _bn_mlp()
    with pytest.raises(ValueError, match="bn_stats"):
        _monitor(model, probe, "running")
