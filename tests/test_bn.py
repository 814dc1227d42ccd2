"""Tests of the reference BN math in :mod:`bnexp.nets.bn` against independent expectations.

Expected values come from torch's own ``nn.BatchNorm1d``/``nn.BatchNorm2d``, from
autograd / finite differences, or from formulas written out in the test itself
(paper Alg. 1, Sec. 3 backward, Alg. 2) -- never from the code under test.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bnexp.nets.bn import (
    NoisyBatchNorm,
    ReferenceBatchNorm,
    batch_norm_backward,
    batch_norm_inference,
    batch_norm_train,
    batch_statistics,
    bn_layers,
    recompute_population_statistics,
    sample_noise,
)
from bnexp.nets.models import CNN, MLP, hidden_layers

DT = torch.float64
SHAPES_2D = [(2, 3), (5, 1), (7, 4), (64, 10)]
SHAPES_4D = [(2, 3, 4, 5), (1, 4, 3, 3), (3, 2, 1, 1), (4, 3, 6, 6)]
ALL_SHAPES = SHAPES_2D + SHAPES_4D


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _data(shape, seed=0, scale=3.0, shift=2.0):
    """Random float64 activations with non-zero mean and non-unit spread per feature."""
    g = _gen(seed)
    x = torch.randn(*shape, generator=g, dtype=DT) * scale + shift
    d = shape[1]
    # give every feature its own offset / scale so per-feature stats really differ
    offs = torch.linspace(-5.0, 5.0, d, dtype=DT)
    scl = torch.linspace(0.5, 4.0, d, dtype=DT)
    view = (1, d) if len(shape) == 2 else (1, d, 1, 1)
    return x * scl.view(view) + offs.view(view)


def _params(d, seed=1):
    g = _gen(seed)
    gamma = torch.rand(d, generator=g, dtype=DT) * 2.0 + 0.5  # in [0.5, 2.5], non-trivial
    beta = torch.randn(d, generator=g, dtype=DT)
    return gamma, beta


def _torch_bn(x, gamma, beta, eps, momentum=0.1):
    cls = nn.BatchNorm1d if x.dim() == 2 else nn.BatchNorm2d
    bn = cls(x.shape[1], eps=eps, momentum=momentum).to(DT)
    with torch.no_grad():
        bn.weight.copy_(gamma)
        bn.bias.copy_(beta)
    return bn


def _dims(x):
    return (0,) if x.dim() == 2 else (0, 2, 3)


def _pf(v, x):
    return v.view(1, -1) if x.dim() == 2 else v.view(1, -1, 1, 1)


# --------------------------------------------------------------------------- (a) forward


@pytest.mark.parametrize("shape", ALL_SHAPES)
@pytest.mark.parametrize("eps", [1e-5, 1e-3])
def test_train_forward_matches_torch(shape, eps):
    x = _data(shape)
    gamma, beta = _params(shape[1])
    bn = _torch_bn(x, gamma, beta, eps).train()
    expected = bn(x)
    got = batch_norm_train(x, gamma, beta, eps)
    assert got.shape == x.shape
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("shape", ALL_SHAPES)
def test_batch_statistics_per_feature(shape):
    x = _data(shape, seed=3)
    mu, sigma2, m = batch_statistics(x)
    dims = _dims(x)
    assert m == (shape[0] if len(shape) == 2 else shape[0] * shape[2] * shape[3])
    # independent: move the feature axis first, flatten the rest, plain mean / biased var
    flat = x.transpose(0, 1).reshape(shape[1], -1)
    assert flat.shape[1] == m
    torch.testing.assert_close(mu, flat.sum(dim=1) / m)
    torch.testing.assert_close(sigma2, ((flat - flat.sum(dim=1, keepdim=True) / m) ** 2).sum(dim=1) / m)
    torch.testing.assert_close(sigma2, x.var(dim=dims, unbiased=False))


def test_batch_statistics_rejects_other_ranks():
    with pytest.raises(ValueError):
        batch_statistics(torch.zeros(2, 3, 4, dtype=DT))
    with pytest.raises(ValueError):
        batch_norm_train(torch.zeros(4, dtype=DT), torch.ones(1, dtype=DT), torch.zeros(1, dtype=DT))


@pytest.mark.parametrize("shape", ALL_SHAPES)
def test_normalized_values_have_zero_mean_unit_variance(shape):
    # gamma = 1, beta = 0, eps = 0: y is x_hat itself
    x = _data(shape, seed=5)
    d = shape[1]
    x_hat = batch_norm_train(x, torch.ones(d, dtype=DT), torch.zeros(d, dtype=DT), eps=0.0)
    dims = _dims(x)
    torch.testing.assert_close(x_hat.mean(dim=dims), torch.zeros(d, dtype=DT), atol=1e-12, rtol=0)
    torch.testing.assert_close(x_hat.var(dim=dims, unbiased=False), torch.ones(d, dtype=DT),
                               atol=1e-10, rtol=0)
    # with gamma/beta, y has mean beta and (biased) std |gamma|
    gamma, beta = _params(d)
    y = batch_norm_train(x, gamma, beta, eps=0.0)
    torch.testing.assert_close(y.mean(dim=dims), beta, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(y.var(dim=dims, unbiased=False).sqrt(), gamma, atol=1e-10, rtol=1e-10)


def test_hand_computed_example():
    # x = [1, 2, 3, 4], one feature, gamma = 2, beta = 1, eps = 0.
    # mu = 2.5; sigma2 = (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25
    # x_hat = (x - 2.5) / sqrt(1.25) = [-1.5, -0.5, 0.5, 1.5] / 1.1180339887...
    # y = 2 * x_hat + 1
    x = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=DT)
    s = math.sqrt(1.25)
    expected = torch.tensor([[1 + 2 * (-1.5) / s], [1 + 2 * (-0.5) / s], [1 + 2 * 0.5 / s], [1 + 2 * 1.5 / s]],
                            dtype=DT)
    # the same numbers written out: [-1.683281573, 0.105572809, 1.894427191, 3.683281573]
    torch.testing.assert_close(expected.flatten(),
                               torch.tensor([-1.6832815730, 0.1055728090, 1.8944271910, 3.6832815730], dtype=DT),
                               atol=1e-9, rtol=0)
    y = batch_norm_train(x, torch.tensor([2.0], dtype=DT), torch.tensor([1.0], dtype=DT), eps=0.0)
    torch.testing.assert_close(y, expected, atol=1e-12, rtol=0)
    mu, sigma2, m = batch_statistics(x)
    assert m == 4
    assert mu.item() == pytest.approx(2.5)
    assert sigma2.item() == pytest.approx(1.25)


def test_hand_computed_example_with_eps_two_features():
    # feature 0: [0, 2] -> mu 1, sigma2 1; feature 1: [5, 5] -> mu 5, sigma2 0.
    # eps = 0.25: x_hat0 = [-1, 1] / sqrt(1.25), x_hat1 = [0, 0] / sqrt(0.25) = 0
    x = torch.tensor([[0.0, 5.0], [2.0, 5.0]], dtype=DT)
    gamma = torch.tensor([3.0, 7.0], dtype=DT)
    beta = torch.tensor([-1.0, 0.5], dtype=DT)
    y = batch_norm_train(x, gamma, beta, eps=0.25)
    a = 3.0 / math.sqrt(1.25)
    expected = torch.tensor([[-1.0 - a, 0.5], [-1.0 + a, 0.5]], dtype=DT)
    torch.testing.assert_close(y, expected, atol=1e-12, rtol=0)


def test_m_equals_two_normalizes_to_plus_minus_one():
    # m = 2, eps = 0: x_hat = +-1 whatever the two values are (when distinct)
    x = torch.tensor([[3.0, -10.0, 0.1], [7.0, 20.0, -0.3]], dtype=DT)
    x_hat = batch_norm_train(x, torch.ones(3, dtype=DT), torch.zeros(3, dtype=DT), eps=0.0)
    expected = torch.tensor([[-1.0, -1.0, 1.0], [1.0, 1.0, -1.0]], dtype=DT)
    torch.testing.assert_close(x_hat, expected, atol=1e-12, rtol=0)


def test_train_output_depends_on_other_examples():
    # Alg. 1: y_i depends on the whole mini-batch
    x = _data((6, 3), seed=11)
    gamma, beta = _params(3)
    y = batch_norm_train(x, gamma, beta)
    x2 = x.clone()
    x2[1:] += 10.0
    y2 = batch_norm_train(x2, gamma, beta)
    assert not torch.allclose(y[0], y2[0])


# --------------------------------------------------------------------------- (b) backward


def _autograd_grads(x, gamma, beta, eps, g):
    x = x.clone().requires_grad_(True)
    gamma = gamma.clone().requires_grad_(True)
    beta = beta.clone().requires_grad_(True)
    y = batch_norm_train(x, gamma, beta, eps)
    (y * g).sum().backward()
    return x.grad, gamma.grad, beta.grad


@pytest.mark.parametrize("shape", ALL_SHAPES)
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_paper_backward_matches_autograd(shape, eps):
    x = _data(shape, seed=21)
    gamma, beta = _params(shape[1], seed=22)
    g = torch.randn(*shape, generator=_gen(23), dtype=DT)
    ax, agamma, abeta = _autograd_grads(x, gamma, beta, eps, g)
    px, pgamma, pbeta = batch_norm_backward(g, x, gamma, eps)
    assert px.shape == x.shape and pgamma.shape == gamma.shape and pbeta.shape == beta.shape
    torch.testing.assert_close(px, ax, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(pgamma, agamma, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(pbeta, abeta, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("shape", ALL_SHAPES)
def test_gradients_match_torch_batchnorm(shape):
    eps = 1e-5
    x = _data(shape, seed=31)
    gamma, beta = _params(shape[1], seed=32)
    g = torch.randn(*shape, generator=_gen(33), dtype=DT)

    bn = _torch_bn(x, gamma, beta, eps).train()
    xt = x.clone().requires_grad_(True)
    (bn(xt) * g).sum().backward()

    ax, agamma, abeta = _autograd_grads(x, gamma, beta, eps, g)
    px, pgamma, pbeta = batch_norm_backward(g, x, gamma, eps)
    for ours in (ax, px):
        torch.testing.assert_close(ours, xt.grad, rtol=1e-8, atol=1e-9)
    for ours in (agamma, pgamma):
        torch.testing.assert_close(ours, bn.weight.grad, rtol=1e-8, atol=1e-9)
    for ours in (abeta, pbeta):
        torch.testing.assert_close(ours, bn.bias.grad, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("shape", [(3, 2), (2, 2, 2, 3)])
def test_batch_norm_train_gradcheck(shape):
    # finite differences, independent of both autograd's formulas and the paper's
    x = _data(shape, seed=41).requires_grad_(True)
    gamma, beta = _params(shape[1], seed=42)
    gamma.requires_grad_(True)
    beta.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b, c: batch_norm_train(a, b, c, 1e-3), (x, gamma, beta))


@pytest.mark.parametrize("shape", [(8, 5), (3, 4, 2, 3)])
def test_input_gradient_properties(shape):
    # Known consequences of normalizing: per feature, dl/dx sums to 0 and is orthogonal to x_hat
    # (y is invariant to shifting and to (eps=0) scaling a feature's batch values).
    x = _data(shape, seed=51)
    gamma, _ = _params(shape[1], seed=52)
    g = torch.randn(*shape, generator=_gen(53), dtype=DT)
    dx, _, dbeta = batch_norm_backward(g, x, gamma, eps=0.0)
    dims = _dims(x)
    d = shape[1]
    torch.testing.assert_close(dx.sum(dim=dims), torch.zeros(d, dtype=DT), atol=1e-10, rtol=0)
    mu = x.mean(dim=dims)
    x_hat = (x - _pf(mu, x)) / _pf(x.var(dim=dims, unbiased=False).sqrt(), x)
    torch.testing.assert_close((dx * x_hat).sum(dim=dims), torch.zeros(d, dtype=DT), atol=1e-10, rtol=0)
    torch.testing.assert_close(dbeta, g.sum(dim=dims))


# --------------------------------------------------------------------------- (c) inference


@pytest.mark.parametrize("make", ["torch", "reference"])
@pytest.mark.parametrize("shape", [(2, 3), (9, 4), (3, 2, 4, 4), (1, 3, 2, 2)])
def test_running_var_is_unbiased_and_eval_uses_population_stats(make, shape):
    eps = 1e-5
    x = _data(shape, seed=61)
    d = shape[1]
    gamma, beta = _params(d, seed=62)
    if make == "torch":
        bn = _torch_bn(x, gamma, beta, eps, momentum=1.0)
    else:
        bn = ReferenceBatchNorm(d, eps=eps, momentum=1.0).to(DT)
        with torch.no_grad():
            bn.weight.copy_(gamma)
            bn.bias.copy_(beta)
    bn.train()
    bn(x)

    dims = _dims(x)
    m = x.numel() // d
    biased = x.var(dim=dims, unbiased=False)
    torch.testing.assert_close(bn.running_mean, x.mean(dim=dims))
    torch.testing.assert_close(bn.running_var, m / (m - 1) * biased)
    torch.testing.assert_close(bn.running_var, x.var(dim=dims, unbiased=True))

    bn.eval()
    x_new = _data(shape, seed=63, scale=1.0, shift=-1.0)
    y = bn(x_new)
    E, V = bn.running_mean, bn.running_var
    formula = _pf(gamma, x_new) * (x_new - _pf(E, x_new)) / torch.sqrt(_pf(V, x_new) + eps) + _pf(beta, x_new)
    torch.testing.assert_close(y, formula, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(batch_norm_inference(x_new, gamma, beta, E, V, eps), formula,
                               rtol=1e-10, atol=1e-10)
    # eval output is not a batch-normalized output (uses population, not batch statistics)
    if m > 2:
        assert not torch.allclose(y, batch_norm_train(x_new, gamma, beta, eps))


@pytest.mark.parametrize("shape", [(6, 4), (5, 3, 2, 2)])
def test_inference_is_per_example(shape):
    d = shape[1]
    gamma, beta = _params(d, seed=71)
    mean = torch.randn(d, generator=_gen(72), dtype=DT)
    var = torch.rand(d, generator=_gen(73), dtype=DT) + 0.5
    x = _data(shape, seed=74)
    y = batch_norm_inference(x, gamma, beta, mean, var)
    # the first example alone gives the same output
    torch.testing.assert_close(batch_norm_inference(x[:1], gamma, beta, mean, var), y[:1], rtol=0, atol=1e-14)
    # changing the other examples changes nothing for the first one
    x2 = x.clone()
    x2[1:] = x2[1:] * -4.0 + 100.0
    y2 = batch_norm_inference(x2, gamma, beta, mean, var)
    torch.testing.assert_close(y2[:1], y[:1], rtol=0, atol=1e-14)
    # the same holds for torch's BN in eval mode, and both agree
    bn = _torch_bn(x, gamma, beta, 1e-5).eval()
    with torch.no_grad():
        bn.running_mean.copy_(mean)
        bn.running_var.copy_(var)
        torch.testing.assert_close(bn(x2), y2, rtol=1e-10, atol=1e-10)


def test_inference_hand_example():
    # E = 2, Var = 3, eps = 1, gamma = 4, beta = -1: y = 4 * (x - 2) / 2 - 1 = 2x - 5
    x = torch.tensor([[0.0], [2.0], [5.0]], dtype=DT)
    y = batch_norm_inference(x, torch.tensor([4.0], dtype=DT), torch.tensor([-1.0], dtype=DT),
                             torch.tensor([2.0], dtype=DT), torch.tensor([3.0], dtype=DT), eps=1.0)
    torch.testing.assert_close(y, torch.tensor([[-5.0], [-1.0], [5.0]], dtype=DT))


# --------------------------------------------------------------------------- (d) Alg. 2 recomputation


def _bn_cfg(**kw):
    base = dict(enabled=True, eps=1e-5, momentum=0.1, impl="torch")
    base.update(kw)
    return SimpleNamespace(**base)


def _randomize_bn_params(model, seed):
    g = _gen(seed)
    with torch.no_grad():
        for layer in bn_layers(model):
            layer.weight.copy_(torch.rand(layer.weight.shape, generator=g, dtype=DT) + 0.5)
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=g, dtype=DT))


def _mlp(impl="torch"):
    torch.manual_seed(0)
    model = MLP(12, [6, 5], 3, "sigmoid", _bn_cfg(impl=impl), init_std=0.3).to(DT)
    _randomize_bn_params(model, 81)
    return model


def _cnn(impl="torch"):
    torch.manual_seed(0)
    model = CNN((2, 8, 8), [3, 4], 1, 5, 3, "relu", _bn_cfg(impl=impl)).to(DT)
    _randomize_bn_params(model, 82)
    return model


def _batches(k, shape, seed):
    g = _gen(seed)
    return [torch.randn(*shape, generator=g, dtype=DT) * 2.0 + 0.5 for _ in range(k)]


def _expected_stats(values):
    """E = mean over batches of mu_B; Var = m/(m-1) * mean over batches of sigma2_B."""
    dims = _dims(values[0])
    m = values[0].numel() // values[0].shape[1]
    mus = torch.stack([v.mean(dim=dims) for v in values])
    vars_ = torch.stack([((v - _pf(v.mean(dim=dims), v)) ** 2).mean(dim=dims) for v in values])
    return mus.mean(dim=0), m / (m - 1) * vars_.mean(dim=0)


@pytest.mark.parametrize("impl", ["torch", "reference"])
@pytest.mark.parametrize("was_training", [True, False])
def test_recompute_mlp_first_and_second_layer(impl, was_training):
    model = _mlp(impl)
    model.train(was_training)
    batches = _batches(4, (7, 1, 3, 4), seed=83)
    params_before = {k: v.clone() for k, v in model.named_parameters()}

    k = recompute_population_statistics(model, batches)
    assert k == 4

    (_, l1), (_, l2) = hidden_layers(model)
    W1 = l1.affine.weight.detach()
    assert l1.affine.bias is None
    z1 = [b.reshape(b.shape[0], -1) @ W1.T for b in batches]  # W u, per batch
    E1, V1 = _expected_stats(z1)
    torch.testing.assert_close(l1.bn.running_mean, E1, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(l1.bn.running_var, V1, rtol=1e-10, atol=1e-12)

    # second layer: its input is sigmoid(BN(W1 u)) with *mini-batch* statistics (training mode)
    g1, b1 = l1.bn.weight.detach(), l1.bn.bias.detach()
    eps = l1.bn.eps
    z2 = []
    for z in z1:
        mu, var = z.mean(dim=0), z.var(dim=0, unbiased=False)
        h = torch.sigmoid(g1 * (z - mu) / torch.sqrt(var + eps) + b1)
        z2.append(h @ l2.affine.weight.detach().T)
    E2, V2 = _expected_stats(z2)
    torch.testing.assert_close(l2.bn.running_mean, E2, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(l2.bn.running_var, V2, rtol=1e-9, atol=1e-12)

    assert model.training is was_training
    assert all(mod.training is was_training for mod in model.modules())
    for name, p in model.named_parameters():
        assert torch.equal(p, params_before[name]), name


@pytest.mark.parametrize("impl", ["torch", "reference"])
def test_recompute_cnn_first_layer(impl):
    model = _cnn(impl)
    model.eval()
    batches = _batches(3, (4, 2, 8, 8), seed=84)
    params_before = {k: v.clone() for k, v in model.named_parameters()}

    assert recompute_population_statistics(model, batches) == 3

    layers = hidden_layers(model)
    first = layers[0][1]
    assert isinstance(first.affine, nn.Conv2d)
    W = first.affine.weight.detach()
    z = [F.conv2d(b, W, bias=None, padding=1) for b in batches]  # (N, C, H, W), m = N*H*W
    E, V = _expected_stats(z)
    m = 4 * 8 * 8
    assert E.shape == (3,)
    torch.testing.assert_close(first.bn.running_mean, E, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(first.bn.running_var, V, rtol=1e-10, atol=1e-12)
    # explicit m/(m-1) factor, once more, from the per-channel pooled values
    biased = torch.stack([zz.transpose(0, 1).reshape(3, -1).var(dim=1, unbiased=False) for zz in z]).mean(0)
    torch.testing.assert_close(first.bn.running_var, biased * m / (m - 1), rtol=1e-10, atol=1e-12)

    assert model.training is False
    assert all(not mod.training for mod in model.modules())
    for name, p in model.named_parameters():
        assert torch.equal(p, params_before[name]), name


def test_recompute_single_batch_equals_unbiased_batch_stats_and_eval_uses_them():
    model = _mlp()
    batch = _batches(1, (9, 12), seed=85)[0]
    recompute_population_statistics(model, iter([batch]))  # any iterable, even a one-shot iterator
    (_, l1), _ = hidden_layers(model)
    z = batch @ l1.affine.weight.detach().T
    torch.testing.assert_close(l1.bn.running_mean, z.mean(dim=0))
    torch.testing.assert_close(l1.bn.running_var, z.var(dim=0, unbiased=True))
    # eval-mode pre-activation of layer 1 is the inference formula with these statistics
    model.eval()
    seen = {}
    h = l1.act.register_forward_pre_hook(lambda mod, inp: seen.setdefault("pre", inp[0].detach()))
    try:
        with torch.no_grad():
            model(batch)
    finally:
        h.remove()
    g1, b1 = l1.bn.weight.detach(), l1.bn.bias.detach()
    expected = g1 * (z - z.mean(0)) / torch.sqrt(z.var(0, unbiased=True) + l1.bn.eps) + b1
    torch.testing.assert_close(seen["pre"], expected)


def test_recompute_zero_batches_raises_and_leaves_model_unchanged():
    model = _mlp()
    model.eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError):
        recompute_population_statistics(model, [])
    assert model.training is False
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):
            continue
        assert torch.equal(v, state[k]), k


@pytest.mark.parametrize("impl", ["torch", "reference"])
def test_recompute_batch_of_one_raises_and_restores(impl):
    # a valid batch first (which moves the running averages in training mode), then m = 1
    model = _mlp(impl)
    model.eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batches = [torch.randn(5, 12, dtype=DT), torch.randn(1, 12, dtype=DT)]
    with pytest.raises(ValueError):
        recompute_population_statistics(model, batches)
    assert model.training is False
    assert all(not mod.training for mod in model.modules())
    for k, v in model.state_dict().items():
        if k.endswith("num_batches_tracked"):  # torch's step counter, unused with a fixed momentum
            continue
        assert torch.equal(v, state[k]), k


def test_recompute_differs_from_ema():
    # after recomputation the running stats are the K-batch averages, not whatever EMA gave
    model = _mlp()
    batches = _batches(3, (10, 12), seed=86)
    model.train()
    with torch.no_grad():
        for b in batches:
            model(b)
    (_, l1), _ = hidden_layers(model)
    ema_mean = l1.bn.running_mean.clone()
    recompute_population_statistics(model, batches)
    z = [b @ l1.affine.weight.detach().T for b in batches]
    E, _ = _expected_stats(z)
    torch.testing.assert_close(l1.bn.running_mean, E)
    assert not torch.allclose(ema_mean, E)


# --------------------------------------------------------------------------- (e) drop-in


@pytest.mark.parametrize("shape", [(8, 5), (2, 3), (4, 3, 5, 5), (2, 2, 1, 3)])
def test_reference_bn_is_drop_in_for_torch(shape):
    d = shape[1]
    eps, momentum = 1e-5, 0.1
    ref = ReferenceBatchNorm(d, eps=eps, momentum=momentum).to(DT)
    tbn = (nn.BatchNorm1d if len(shape) == 2 else nn.BatchNorm2d)(d, eps=eps, momentum=momentum).to(DT)
    # same defaults: gamma = 1, beta = 0, running mean 0, running var 1
    for name in ("weight", "bias", "running_mean", "running_var"):
        torch.testing.assert_close(getattr(ref, name), getattr(tbn, name), rtol=0, atol=0)
    assert {n for n, _ in ref.named_parameters()} == {n for n, _ in tbn.named_parameters()}
    assert {"running_mean", "running_var"} <= {n for n, _ in tbn.named_buffers()}
    gamma, beta = _params(d, seed=91)
    with torch.no_grad():
        for layer in (ref, tbn):
            layer.weight.copy_(gamma)
            layer.bias.copy_(beta)

    ref.train()
    tbn.train()
    for step in range(4):
        x = _data(shape, seed=100 + step, scale=1.0 + step, shift=float(step))
        torch.testing.assert_close(ref(x), tbn(x), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(ref.running_mean, tbn.running_mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ref.running_var, tbn.running_var, rtol=1e-12, atol=1e-12)

    # independent EMA of (mean, unbiased var) over the same 4 batches
    exp_mean, exp_var = torch.zeros(d, dtype=DT), torch.ones(d, dtype=DT)
    for step in range(4):
        x = _data(shape, seed=100 + step, scale=1.0 + step, shift=float(step))
        dims = _dims(x)
        exp_mean = (1 - momentum) * exp_mean + momentum * x.mean(dim=dims)
        exp_var = (1 - momentum) * exp_var + momentum * x.var(dim=dims, unbiased=True)
    torch.testing.assert_close(ref.running_mean, exp_mean)
    torch.testing.assert_close(ref.running_var, exp_var)

    ref.eval()
    tbn.eval()
    x = _data(shape, seed=200)
    torch.testing.assert_close(ref(x), tbn(x), rtol=1e-10, atol=1e-10)
    # eval mode does not move the running statistics
    torch.testing.assert_close(ref.running_mean, exp_mean)
    torch.testing.assert_close(ref.running_var, exp_var)


def test_reference_bn_trains_like_torch_bn_in_a_network():
    # same MLP with impl=torch and impl=reference: identical SGD trajectories
    def build(impl):
        torch.manual_seed(7)
        return MLP(10, [8, 6], 3, "sigmoid", _bn_cfg(impl=impl), init_std=0.2).to(DT)

    mt, mr = build("torch"), build("reference")
    assert isinstance(bn_layers(mt)[0], nn.BatchNorm1d)
    assert isinstance(bn_layers(mr)[0], ReferenceBatchNorm)
    mr.load_state_dict(mt.state_dict(), strict=False)  # torch BN has an extra num_batches_tracked buffer
    opt_t = torch.optim.SGD(mt.parameters(), lr=0.5)
    opt_r = torch.optim.SGD(mr.parameters(), lr=0.5)
    g = _gen(300)
    for _ in range(5):
        x = torch.randn(16, 10, generator=g, dtype=DT)
        t = torch.randint(0, 3, (16,), generator=g)
        for model, opt in ((mt, opt_t), (mr, opt_r)):
            opt.zero_grad()
            F.cross_entropy(model(x), t).backward()
            opt.step()
    for (n, pt), (_, pr) in zip(mt.named_parameters(), mr.named_parameters()):
        torch.testing.assert_close(pr, pt, rtol=1e-9, atol=1e-10, msg=n)
    for lt, lr_ in zip(bn_layers(mt), bn_layers(mr)):
        torch.testing.assert_close(lr_.running_mean, lt.running_mean, rtol=1e-9, atol=1e-10)
        torch.testing.assert_close(lr_.running_var, lt.running_var, rtol=1e-9, atol=1e-10)
    mt.eval()
    mr.eval()
    x = torch.randn(5, 10, generator=g, dtype=DT)
    torch.testing.assert_close(mr(x), mt(x), rtol=1e-9, atol=1e-10)


# ---------------------------------------------------------------------------- noisy BN (Santurkar et al. 2018, Sec. 2.1)

def test_sample_noise_distribution():
    a, b, c, d = 0.5, 1.25, 0.1, 0.1
    gen = torch.Generator().manual_seed(10)
    mus, sigmas = [], []
    for _ in range(200):
        s, m, mu, sigma = sample_noise((400, 5), 1, gen, a, b, c, d)
        assert s.shape == m.shape == (400, 5) and mu.shape == sigma.shape == (5,)
        # per activation: m within [mu - c, mu + c], s ~ N(sigma, d)
        assert bool(((m - mu).abs() <= c + 1e-6).all())
        assert torch.allclose(m.mean(0), mu, atol=4 * c / math.sqrt(3 * 400))
        assert torch.allclose(s.mean(0), sigma, atol=4 * d / math.sqrt(400))
        mus.append(mu)
        sigmas.append(sigma)
    mus, sigmas = torch.cat(mus), torch.cat(sigmas)   # 1000 draws each
    assert mus.min() >= -a and mus.max() <= a and mus.min() < -0.95 * a and mus.max() > 0.95 * a
    assert mus.mean().item() == pytest.approx(0.0, abs=0.05)
    assert mus.var().item() == pytest.approx(a * a / 3, rel=0.15)
    assert sigmas.min() >= 1 and sigmas.max() <= b
    assert sigmas.mean().item() == pytest.approx((1 + b) / 2, abs=0.02)
    # within-step spread: uniform half-width c, normal std d
    s, m, mu, sigma = sample_noise((20000, 2), 1, gen, a, b, c, d)
    assert (m - mu).std().item() == pytest.approx(c / math.sqrt(3), rel=0.05)
    assert (s - sigma).std().item() == pytest.approx(d, rel=0.05)
    # 4-D: mu per channel (dim 1), shared over N, H, W
    s, m, mu, sigma = sample_noise((3, 4, 5, 6), 1, gen, a, b, c=0.0, d=0.0)
    assert torch.equal(m, mu.view(1, 4, 1, 1).expand(3, 4, 5, 6))
    assert torch.equal(s, sigma.view(1, 4, 1, 1).expand(3, 4, 5, 6))
    with pytest.raises(ValueError):
        sample_noise((2, 2), 1, gen, b=0.5)


def test_noisy_bn_training_noise_matches_helper_and_changes():
    bn = nn.BatchNorm2d(3)
    noisy = NoisyBatchNorm(bn, seed=11)
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(12))
    ref_gen = torch.Generator().manual_seed(11)
    ref_bn = copy.deepcopy(bn)
    outs = []
    for _ in range(2):
        y = noisy(x)
        s, m, mu, sigma = sample_noise(x.shape, 1, ref_gen)
        assert torch.equal(y, s * ref_bn(x) + m)
        assert torch.equal(noisy.last_mu, mu) and torch.equal(noisy.last_sigma, sigma)
        outs.append((y, noisy.last_mu.clone()))
    assert not torch.equal(outs[0][0], outs[1][0]) and not torch.equal(outs[0][1], outs[1][1])
    # gamma = 0, beta = 0 -> bn(x) = 0, so the output is exactly the additive noise m
    zero = NoisyBatchNorm(nn.BatchNorm1d(4), seed=0)
    nn.init.zeros_(zero.bn.weight)
    y = zero(torch.randn(1000, 4))
    assert bool(((y - zero.last_mu).abs() <= 0.1 + 1e-6).all())
    assert bool((zero.last_mu.abs() <= 0.5).all())


def test_noisy_bn_eval_is_expected_scale_times_bn_and_state_dict():
    """Eval: E[s] * bn(x) + E[m] with E[s] = (1 + b) / 2 (1.125 for b = 1.25) and E[m] = 0, no noise."""
    bn = nn.BatchNorm1d(4)
    noisy = NoisyBatchNorm(bn, seed=3)
    gen = torch.Generator().manual_seed(13)
    for _ in range(3):
        noisy(torch.randn(8, 4, generator=gen) * 2 + 1)  # update running stats
    noisy.eval()
    x = torch.randn(5, 4, generator=gen)
    assert noisy.expected_scale == 1.125 and noisy.expected_shift == 0.0
    assert torch.equal(noisy(x), bn(x) * 1.125)
    assert torch.equal(noisy(x), noisy(x))  # no noise in eval
    plain = nn.BatchNorm1d(4)
    assert set(noisy.state_dict()) == {f"bn.{k}" for k in plain.state_dict()}
    fresh = NoisyBatchNorm(nn.BatchNorm1d(4))
    fresh.load_state_dict({f"bn.{k}": v for k, v in bn.state_dict().items()})
    fresh.eval()
    assert torch.equal(fresh(x), bn(x) * 1.125)
    # noise_scale 0 (b = 1, the identity noise): eval is exactly plain BN
    identity = NoisyBatchNorm(bn, a=0.0, b=1.0, c=0.0, d=0.0).eval()
    assert identity.expected_scale == 1.0 and torch.equal(identity(x), bn(x))


@pytest.mark.parametrize("a,b,c,d", [(0.5, 1.25, 0.1, 0.1), (5.0, 3.5, 1.0, 1.0)])
def test_noisy_bn_eval_is_the_mean_of_training_over_the_noise(a, b, c, d):
    """For a frozen input, the eval output equals the Monte Carlo mean of K training outputs.

    The inner BN is put where training and eval normalize alike: running statistics set to the
    input's batch statistics (biased variance, as Alg. 1 uses in training) and momentum 0, so
    bn(x) = y in both modes and only the noise differs. Per activation, s * y + m has variance
    y^2 Var[s] + Var[m] with Var[s] = (b - 1)^2 / 12 + d^2 (sigma_t ~ U(1, b), then N(sigma_t, d^2))
    and Var[m] = a^2 / 3 + c^2 / 3 (mu_t ~ U(-a, a), then U(mu_t - c, mu_t + c)), and each step's
    draws are independent, so the mean of K = 1000 steps is within 5 standard errors sqrt(Var / K) of
    its expectation (a miss somewhere among the 24 activations has probability 24 * 5.7e-7 ~ 1.4e-5).
    """
    gen = torch.Generator().manual_seed(21)
    x = torch.randn(6, 4, generator=gen, dtype=DT) * 3 + 1
    bn = nn.BatchNorm1d(4, momentum=0.0).double()
    with torch.no_grad():
        bn.weight.copy_(torch.tensor([1.0, 2.0, 0.5, -1.0]))
        bn.bias.copy_(torch.tensor([0.0, 1.0, -2.0, 0.3]))
        bn.running_mean.copy_(x.mean(0))
        bn.running_var.copy_(x.var(0, unbiased=False))
    noisy = NoisyBatchNorm(bn, a, b, c, d, seed=22)
    k = 1_000
    with torch.no_grad():
        y = bn(x)  # training mode: batch statistics
        total = torch.zeros_like(x)
        for _ in range(k):
            total += noisy(x)
        mc_mean = total / k
        noisy.eval()
        torch.testing.assert_close(bn(x), y)  # the inner BN normalizes alike in both modes
        want = noisy(x)
    torch.testing.assert_close(want, (1 + b) / 2 * y)
    var = y ** 2 * ((b - 1) ** 2 / 12 + d ** 2) + (a ** 2 + c ** 2) / 3
    z = (mc_mean - want).abs() / torch.sqrt(var / k)
    assert float(z.max()) < 5.0, z
    # and the no-noise eval output (scale 1) would be far off wherever |y| is not small
    assert float(((mc_mean - y).abs() / torch.sqrt(var / k)).max()) > 10.0


def test_noisy_bn_seeded_reproducibility_and_noise_state():
    x = torch.randn(6, 3, generator=torch.Generator().manual_seed(14))
    n1 = NoisyBatchNorm(nn.BatchNorm1d(3), seed=5)
    n2 = NoisyBatchNorm(nn.BatchNorm1d(3), seed=5)
    n3 = NoisyBatchNorm(nn.BatchNorm1d(3), seed=6)
    y1, y2, y3 = n1(x), n2(x), n3(x)
    assert torch.equal(y1, y2) and not torch.equal(y1, y3)
    rng = torch.get_rng_state()
    state = n1.noise_state()
    a = n1(x)
    n4 = NoisyBatchNorm(nn.BatchNorm1d(3), seed=0)
    n4.load_state_dict(n1.state_dict())
    n4.load_noise_state(state)
    n4.bn.load_state_dict(n2.bn.state_dict())  # BN state as of before the second step
    assert torch.equal(n4(x), a)
    assert torch.equal(torch.get_rng_state(), rng)  # global RNG untouched
    assert NoisyBatchNorm(nn.BatchNorm1d(3)).noise_state()["state"] is None
    with pytest.raises(ValueError):
        NoisyBatchNorm(nn.BatchNorm1d(3), b=0.9)
