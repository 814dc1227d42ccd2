"""Tests of bnexp.train.ics against hand-computed and closed-form values."""

from __future__ import annotations

import copy
import math
from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from bnexp.train.ics import (DistributionShiftTracker, gradient_ics, landscape_probe, layer_param_groups,
                       per_unit_shift, per_unit_wasserstein1, unit_moments, wasserstein1)
from bnexp.nets.models import MLP, CNN

torch.set_num_threads(1)


# ---------------------------------------------------------------------------- Wasserstein-1

def t(*v):
    return torch.tensor(v, dtype=torch.float64)


def test_w1_known_samples():
    assert wasserstein1(t(0, 1), t(2, 3)) == pytest.approx(2.0)
    assert wasserstein1(t(3, 0, 1), t(1, 3, 0)) == 0.0  # same multiset, order irrelevant


def test_w1_shift_by_constant():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for c in (0.3, -1.7):
        assert wasserstein1(x, x + c) == pytest.approx(abs(c), abs=1e-12)


def test_w1_unequal_sizes_by_hand():
    # a = {0, 1}: F_a = 1/2 on [0, 1);  b = {0, 1, 2}: F_b = 1/3 on [0, 1), 2/3 on [1, 2)
    # W1 = |1/2 - 1/3| * 1 + |1 - 2/3| * 1 = 1/6 + 1/3 = 1/2
    assert wasserstein1(t(0, 1), t(0, 1, 2)) == pytest.approx(0.5)
    assert wasserstein1(t(0, 1, 2), t(0, 1)) == pytest.approx(0.5)
    # a = {0}, b = {1, 3}: mass 1/2 moves 1, mass 1/2 moves 3 -> 2
    assert wasserstein1(t(0), t(1, 3)) == pytest.approx(2.0)


def _w1_by_quantiles(a, b):
    """Exact integral of |F_a^{-1}(u) - F_b^{-1}(u)| over u in (0, 1] with rational breakpoints."""
    a, b = sorted(a.tolist()), sorted(b.tolist())
    n, m = len(a), len(b)
    cuts = sorted({Fraction(k, n) for k in range(n + 1)} | {Fraction(k, m) for k in range(m + 1)})
    total = 0.0
    for lo, hi in zip(cuts[:-1], cuts[1:]):
        mid = (lo + hi) / 2  # F^{-1}(u) = sorted[ceil(u * size) - 1]
        qa = a[math.ceil(mid * n) - 1]
        qb = b[math.ceil(mid * m) - 1]
        total += float(hi - lo) * abs(qa - qb)
    return total


def test_w1_unequal_sizes_matches_quantile_integral():
    gen = torch.Generator().manual_seed(1)
    for n, m in [(7, 5), (3, 11), (20, 13)]:
        a = torch.randn(n, generator=gen, dtype=torch.float64)
        b = torch.randn(m, generator=gen, dtype=torch.float64) * 2 + 0.5
        assert wasserstein1(a, b) == pytest.approx(_w1_by_quantiles(a, b), abs=1e-12)


def test_w1_errors():
    with pytest.raises(ValueError):
        wasserstein1(torch.zeros(2, 2), torch.zeros(4))
    with pytest.raises(ValueError):
        wasserstein1(torch.zeros(0), torch.zeros(4))
    with pytest.raises(ValueError):
        wasserstein1(t(0, float("nan")), t(1, 2))


# ---------------------------------------------------------------------------- per-unit shift

def _hand_pair():
    # unit 0: ref [0,0,2,2] mean 1 std 1; now [1,1,5,5] mean 3 std 2
    # unit 1: ref [0,4,0,4] mean 2 std 2; now [2,3,2,3] mean 2.5 std 0.5
    x_ref = torch.tensor([[0., 0.], [0., 4.], [2., 0.], [2., 4.]])
    x_now = torch.tensor([[1., 2.], [1., 3.], [5., 2.], [5., 3.]])
    return x_ref, x_now


def test_per_unit_shift_by_hand():
    x_ref, x_now = _hand_pair()
    mean, std = unit_moments(x_ref)
    assert mean.tolist() == [1.0, 2.0] and std.tolist() == [1.0, 2.0]
    out = per_unit_shift(x_ref, x_now)
    assert out["mean_shift"] == pytest.approx((2 / 1 + 0.5 / 2) / 2)        # 1.125
    assert out["log_std_ratio"] == pytest.approx((math.log(2) + math.log(4)) / 2)
    assert per_unit_shift(x_ref, x_ref) == {"mean_shift": 0.0, "log_std_ratio": 0.0}


def test_per_unit_shift_conv_pools_over_nhw():
    gen = torch.Generator().manual_seed(2)
    x_ref = torch.randn(3, 4, 5, 5, generator=gen)
    x_now = torch.randn(6, 4, 2, 3, generator=gen) * 1.5 + 0.7  # different P, H, W: fine
    flat = lambda x: x.permute(0, 2, 3, 1).reshape(-1, 4)
    got = per_unit_shift(x_ref, x_now)
    want = per_unit_shift(flat(x_ref), flat(x_now))
    assert got["mean_shift"] == pytest.approx(want["mean_shift"])
    assert got["log_std_ratio"] == pytest.approx(want["log_std_ratio"])


def test_per_unit_shift_constant_unit_is_finite_and_errors():
    x_ref = torch.tensor([[1., 0.], [1., 2.]])   # unit 0 constant: std clamped by eps
    x_now = torch.tensor([[1.5, 0.], [1.5, 2.]])
    out = per_unit_shift(x_ref, x_now, eps=1e-3)
    assert out["mean_shift"] == pytest.approx((0.5 / 1e-3 + 0) / 2)
    assert out["log_std_ratio"] == pytest.approx(0.0)
    with pytest.raises(ValueError):
        per_unit_shift(torch.zeros(4, 2), torch.zeros(4, 3))
    with pytest.raises(ValueError):
        per_unit_shift(torch.zeros(4, 2, 3), torch.zeros(4, 2, 3))


# ---------------------------------------------------------------------------- per-unit W1

def test_per_unit_w1_matches_scipy_per_unit_then_mean():
    scipy_stats = pytest.importorskip("scipy.stats")
    gen = torch.Generator().manual_seed(11)
    a = torch.randn(40, 5, generator=gen, dtype=torch.float64)
    b = 1.7 * torch.randn(55, 5, generator=gen, dtype=torch.float64) + torch.arange(5, dtype=torch.float64)
    expected = sum(scipy_stats.wasserstein_distance(a[:, j].numpy(), b[:, j].numpy()) for j in range(5)) / 5
    assert per_unit_wasserstein1(a, b) == pytest.approx(expected, rel=1e-12)
    # equal sizes (the tracker's fast path)
    b2 = b[:40]
    expected2 = sum(scipy_stats.wasserstein_distance(a[:, j].numpy(), b2[:, j].numpy()) for j in range(5)) / 5
    assert per_unit_wasserstein1(a, b2) == pytest.approx(expected2, rel=1e-12)
    # conv: units are the channels, pooled over (P, H, W)
    c1 = torch.randn(6, 3, 4, 4, generator=gen, dtype=torch.float64)
    c2 = torch.randn(6, 3, 4, 4, generator=gen, dtype=torch.float64) * 2
    expected3 = sum(scipy_stats.wasserstein_distance(c1[:, j].reshape(-1).numpy(), c2[:, j].reshape(-1).numpy())
                    for j in range(3)) / 3
    assert per_unit_wasserstein1(c1, c2) == pytest.approx(expected3, rel=1e-12)


def test_per_unit_w1_sees_shifts_that_cancel_when_pooled():
    # two units swap their distributions: pooled W1 = 0, per unit each moved by 3
    gen = torch.Generator().manual_seed(12)
    z = torch.randn(200, generator=gen, dtype=torch.float64)
    before = torch.stack([z, z + 3], dim=1)
    after = torch.stack([z + 3, z], dim=1)
    assert wasserstein1(before.reshape(-1), after.reshape(-1)) == pytest.approx(0.0, abs=1e-12)
    assert per_unit_wasserstein1(before, after) == pytest.approx(3.0, rel=1e-12)
    tr = DistributionShiftTracker(max_values=10_000)
    tr.update({"l": before}, step=0)
    r = tr.update({"l": after}, step=1)["l"]
    assert r["w1_first"] == pytest.approx(3.0, rel=1e-6) and r["w1_pooled_first"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError):
        per_unit_wasserstein1(before, torch.zeros(4, 3))


# ---------------------------------------------------------------------------- tracker

def test_tracker_prev_first_and_checkpoint():
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(50, 3, generator=gen)
    std = x.std(dim=0, unbiased=False)
    tr = DistributionShiftTracker(max_values=10_000)
    r0 = tr.update({"layer1": x}, step=0)
    assert r0["layer1"] == {k: 0.0 for k in DistributionShiftTracker.KEYS}

    c = 0.5
    r1 = tr.update({"layer1": x + c}, step=10)["layer1"]
    assert r1["w1_prev"] == pytest.approx(c, abs=1e-6) and r1["w1_first"] == pytest.approx(c, abs=1e-6)
    assert r1["mean_shift_prev"] == pytest.approx(float((c / std).mean()), rel=1e-5)
    assert r1["log_std_ratio_prev"] == pytest.approx(0.0, abs=1e-5)

    # checkpoint: a restored tracker continues identically
    state = tr.state_dict()
    assert all(v.device.type == "cpu" for s in state["first"].values() for v in s.values()
               if isinstance(v, torch.Tensor))
    tr2 = DistributionShiftTracker()
    tr2.load_state_dict(copy.deepcopy(state))
    x2 = 2 * x + 2 * c  # std doubles, mean moves
    r2 = tr.update({"layer1": x2}, step=20)["layer1"]
    r2b = tr2.update({"layer1": x2}, step=20)["layer1"]
    assert r2 == r2b
    assert r2["w1_pooled_first"] == pytest.approx(wasserstein1(x.reshape(-1), x2.reshape(-1)), abs=1e-5)
    assert r2["w1_pooled_prev"] == pytest.approx(wasserstein1((x + c).reshape(-1), x2.reshape(-1)), abs=1e-5)
    # per unit: x2 = 2x + 2c, so unit j's W1 to the first snapshot is mean_i |x_ij + 2c| (same order)
    assert r2["w1_first"] == pytest.approx(float((x + 2 * c).abs().mean()), abs=1e-5)
    assert r2["log_std_ratio_prev"] == pytest.approx(math.log(2), abs=1e-5)
    assert r2["log_std_ratio_first"] == pytest.approx(math.log(2), abs=1e-5)

    with pytest.raises(ValueError):
        tr.update({"layer1": torch.zeros(5, 4)}, step=30)  # unit count changed


def test_tracker_subsample_cap_and_conv():
    x = torch.arange(400, dtype=torch.float32).reshape(100, 4)  # cap 40 -> every 10th example
    tr = DistributionShiftTracker(max_values=40)
    tr.update({"l": x}, step=0)
    vals = tr.first["l"]["values"]
    assert vals.numel() == 40
    assert torch.equal(vals, x[::10].reshape(-1).sort().values)  # all 4 units represented
    assert torch.equal(tr.first["l"]["units"], x[::10])  # 10 values per unit, sorted per column
    r = tr.update({"l": x + 3}, step=1)["l"]
    assert r["w1_prev"] == pytest.approx(3.0) and r["w1_pooled_prev"] == pytest.approx(3.0)
    # conv activations, different layers in one call
    tr = DistributionShiftTracker(max_values=1000)
    gen = torch.Generator().manual_seed(4)
    c = torch.randn(8, 2, 4, 4, generator=gen)
    tr.update({"conv": c, "fc": torch.randn(8, 5, generator=gen)}, step=0)
    r = tr.update({"conv": c - 1.25}, step=1)
    assert set(r) == {"conv"} and r["conv"]["w1_first"] == pytest.approx(1.25, abs=1e-6)


# ---------------------------------------------------------------------------- gradient ICS

def _linear2(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4, bias=False), nn.Linear(4, 2, bias=False)).double()


def _sse(out, target):
    return 0.5 * ((out - target) ** 2).sum()


def _regression_data(seed: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, 3) float64 inputs and (n, 2) targets, standard normal, from generator ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 3, generator=gen, dtype=torch.float64),
            torch.randn(n, 2, generator=gen, dtype=torch.float64))


GROUPS, WEIGHTS = [["0.weight"], ["1.weight"]], ["0.weight", "1.weight"]  # _linear2: one layer a group


def _closed_form_g2(W1, W2, X, T, W1_new):
    """G2 = R^T H at (W1, W2); G2' the same at (W1_new, W2); rows of X, T are examples."""
    H = X @ W1.T
    R = H @ W2.T - T
    Hn = X @ W1_new.T
    Rn = Hn @ W2.T - T
    return R.T @ H, Rn.T @ Hn, W2.T @ R.T @ X  # G2, G2', G1


def test_gradient_ics_linear_closed_form_sgd():
    model = _linear2()
    X, T = _regression_data(5, 6)
    lr = 0.05
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    W1, W2 = model[0].weight.detach().clone(), model[1].weight.detach().clone()
    H = X @ W1.T
    G1 = W2.T @ (H @ W2.T - T).T @ X
    G2, G2p, _ = _closed_form_g2(W1, W2, X, T, W1 - lr * G1)

    out = gradient_ics(model, _sse, X, T, opt, GROUPS, WEIGHTS)
    assert out[0]["l2"] == 0.0 and out[0]["cos"] == pytest.approx(1.0, abs=1e-12)
    assert out[0]["g_norm"] == pytest.approx(float(G1.norm()), rel=1e-10)
    assert out[1]["g_norm"] == pytest.approx(float(G2.norm()), rel=1e-10)
    assert out[1]["l2"] == pytest.approx(float((G2 - G2p).norm()), rel=1e-10)
    assert out[1]["l2"] > 0
    cos = float((G2 * G2p).sum() / (G2.norm() * G2p.norm()))
    assert out[1]["cos"] == pytest.approx(cos, rel=1e-10)
    assert out[1]["l2_rel"] == pytest.approx(float((G2 - G2p).norm() / G2.norm()), rel=1e-10)
    assert out[0]["trivial"] is True and out[1]["trivial"] is False and out[0]["l2_rel"] == 0.0


def test_gradient_ics_relative_is_free_of_the_gradient_scale():
    # A loss k times smaller (a plateau: small gradients) with a k times larger rate takes the
    # same step, so every gradient is exactly k times smaller: l2 shrinks by k, l2_rel does not.
    k = 1e-4
    X, T = _regression_data(5, 6)
    m1, m2 = _linear2(), _linear2()
    big = gradient_ics(m1, _sse, X, T, torch.optim.SGD(m1.parameters(), lr=0.05), GROUPS, WEIGHTS)
    small = gradient_ics(m2, lambda o, t: k * _sse(o, t), X, T, torch.optim.SGD(m2.parameters(), lr=0.05 / k),
                         GROUPS, WEIGHTS)
    assert small[1]["l2"] == pytest.approx(k * big[1]["l2"], rel=1e-8)
    assert small[1]["l2_rel"] == pytest.approx(big[1]["l2_rel"], rel=1e-8)
    assert big[1]["l2_rel"] > 0


def test_gradient_ics_replicates_momentum_weight_decay():
    model = _linear2(1)
    X, T = _regression_data(6, 6)
    lr, mom, wd = 0.02, 0.9, 0.01
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=mom, weight_decay=wd)
    for _ in range(2):  # populate the momentum buffers
        opt.zero_grad()
        _sse(model(X), T).backward()
        opt.step()
    W1, W2 = model[0].weight.detach().clone(), model[1].weight.detach().clone()
    buf = opt.state[model[0].weight]["momentum_buffer"].clone()
    H = X @ W1.T
    G1 = W2.T @ (H @ W2.T - T).T @ X
    W1_new = W1 - lr * (mom * buf + G1 + wd * W1)  # torch SGD: buf <- mom*buf + (g + wd*w)
    G2, G2p, _ = _closed_form_g2(W1, W2, X, T, W1_new)
    out = gradient_ics(model, _sse, X, T, opt, GROUPS, WEIGHTS)
    assert out[1]["l2"] == pytest.approx(float((G2 - G2p).norm()), rel=1e-9)


def test_gradient_ics_matches_real_adam_step():
    model = _linear2(2)
    X, T = _regression_data(7, 8)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-3)
    opt.zero_grad()
    _sse(model(X), T).backward()
    opt.step()
    W1, W2 = model[0].weight.detach().clone(), model[1].weight.detach().clone()
    out = gradient_ics(model, _sse, X, T, opt, GROUPS, WEIGHTS)
    opt.zero_grad()
    _sse(model(X), T).backward()
    opt.step()  # the real update; G2' must use exactly this W1
    G2, G2p, _ = _closed_form_g2(W1, W2, X, T, model[0].weight.detach())
    assert out[1]["l2"] == pytest.approx(float((G2 - G2p).norm()), rel=1e-9)


def test_gradient_ics_errors():
    model = _linear2()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    X, T = torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 2, dtype=torch.float64)
    with pytest.raises(ValueError):
        gradient_ics(model, _sse, X, T, opt, [["0.weight"]], ["0.weight", "1.weight"])
    with pytest.raises(ValueError):
        gradient_ics(model, _sse, X, T, opt, [["0.weight"], ["1.weight"]], ["0.weight", "0.weight"])
    with pytest.raises(ValueError):
        gradient_ics(model, _sse, X, T, opt, [["0.weight"], ["nope"]], ["0.weight", "nope"])


# ---------------------------------------------------------------------------- untouched state

def _bn_mlp_and_batch():
    torch.manual_seed(0)
    cfg = SimpleNamespace(enabled=True, eps=1e-5, momentum=0.1, impl="torch")
    model = MLP(12, [8, 6], 3, "relu", cfg, init_std=0.3, dropout=0.2)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(16, 12, generator=gen)
    y = torch.randint(0, 3, (16,), generator=gen)
    return model, x, y


def _snapshot(model, opt):
    return {"params": {n: p.detach().clone() for n, p in model.named_parameters()},
            "grads": {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
            "buffers": {n: b.clone() for n, b in model.named_buffers()},
            "training": model.training,
            "opt": copy.deepcopy(opt.state_dict()),
            "rng": torch.get_rng_state()}


def _assert_same(a, b):
    for k in ("params", "buffers"):
        assert a[k].keys() == b[k].keys()
        for n in a[k]:
            assert torch.equal(a[k][n], b[k][n]), (k, n)
    for n in a["grads"]:
        assert (a["grads"][n] is None) == (b["grads"][n] is None)
        if a["grads"][n] is not None:
            assert torch.equal(a["grads"][n], b["grads"][n]), n
    assert a["training"] == b["training"]
    assert torch.equal(a["rng"], b["rng"])
    assert a["opt"]["param_groups"] == b["opt"]["param_groups"]
    for pid, st in a["opt"]["state"].items():
        for k, v in st.items():
            assert torch.equal(torch.as_tensor(v), torch.as_tensor(b["opt"]["state"][pid][k])), (pid, k)


@pytest.mark.parametrize("train_mode", [True, False])
def test_measurements_leave_model_optimizer_and_rng_untouched(train_mode):
    model, x, y = _bn_mlp_and_batch()
    loss_fn = nn.functional.cross_entropy
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    model.train()
    for _ in range(2):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()  # leaves grads, momentum buffers and BN running stats populated
    model.train(train_mode)
    before = _snapshot(model, opt)
    groups, weights = layer_param_groups(model)
    assert weights == ["hidden.0.affine.weight", "hidden.1.affine.weight", "classifier.weight"]
    assert groups[0] == ["hidden.0.affine.weight", "hidden.0.bn.weight", "hidden.0.bn.bias"]
    ics = gradient_ics(model, loss_fn, x, y, opt, groups, weights)
    assert len(ics) == 3 and ics[0]["l2"] == 0.0
    assert all(r["l2"] > 0 and -1 <= r["cos"] <= 1 and r["g_norm"] > 0 for r in ics[1:])
    _assert_same(before, _snapshot(model, opt))
    probe = landscape_probe(model, loss_fn, x, y, [0.01, 0.1])
    assert probe["loss_variation"] >= 0 and probe["beta_smoothness"] > 0
    _assert_same(before, _snapshot(model, opt))
    # deterministic: dropout masks come from the (restored) global RNG state
    assert gradient_ics(model, loss_fn, x, y, opt, groups, weights) == ics


def test_layer_param_groups_cnn():
    cfg = SimpleNamespace(enabled=True, eps=1e-5, momentum=0.1, impl="torch")
    model = CNN((1, 8, 8), [2], 1, 4, 3, "relu", cfg)
    groups, weights = layer_param_groups(model)
    assert weights == ["features.0.affine.weight", "fc.affine.weight", "classifier.weight"]
    assert groups[-1] == ["classifier.weight", "classifier.bias"]


# ---------------------------------------------------------------------------- landscape

class _Quadratic(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def forward(self, x):
        return self.w


def _quad_loss(w, A):
    return 0.5 * w @ A @ w


def _spd(eigs, seed=9):
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn(len(eigs), len(eigs), generator=gen, dtype=torch.float64))
    return Q @ torch.diag(torch.tensor(eigs, dtype=torch.float64)) @ Q.T, Q


def test_landscape_quadratic_closed_form():
    eigs = [0.5, 1.0, 2.0, 4.0]
    A, Q = _spd(eigs)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    etas = [0.01, 0.1, 0.3]
    model = _Quadratic(w)
    out = landscape_probe(model, _quad_loss, None, A, etas)
    g = A @ w
    beta = float((A @ g).norm() / g.norm())  # grad diff = eta A g, step = eta g
    assert out["beta_smoothness"] == pytest.approx(beta, rel=1e-10)
    assert out["beta_smoothness"] <= max(eigs) + 1e-12
    assert out["grad_predictiveness"] == pytest.approx(max(etas) * float((A @ g).norm()), rel=1e-10)
    losses = [float(0.5 * (w - e * g) @ A @ (w - e * g)) for e in [0.0] + etas]
    assert out["step_sizes"] == [0.0] + etas
    assert out["losses"] == pytest.approx(losses, rel=1e-12)
    assert out["loss_variation"] == pytest.approx(max(losses) - min(losses), rel=1e-10)
    assert out["grad_norm"] == pytest.approx(float(g.norm()))
    assert torch.equal(model.w.detach(), w) and model.w.grad is None


def test_landscape_quadratic_top_eigenvector():
    eigs = [0.5, 1.0, 2.0, 4.0]
    A, Q = _spd(eigs)
    w = 2.0 * Q[:, 3]  # eigenvector of lambda_max = 4
    out = landscape_probe(_Quadratic(w), _quad_loss, None, A, [0.05, 0.2])
    assert out["beta_smoothness"] == pytest.approx(4.0, rel=1e-10)


def test_landscape_relative_quadratic_closed_form():
    eigs = [0.5, 1.0, 2.0, 4.0]
    A, _ = _spd(eigs)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0], dtype=torch.float64)
    rhos = [0.01, 0.05]
    out = landscape_probe(_Quadratic(w), _quad_loss, None, A, [0.1], rel_step_sizes=rhos)
    g, n = A @ w, float(w.norm())
    # one tensor: step -rho * n * g / ||g||; grad_q = n * grad, so beta_rel = n^2 ||A g|| / ||g||
    assert out["rel_beta_smoothness"] == pytest.approx(n ** 2 * float((A @ g).norm() / g.norm()), rel=1e-10)
    assert out["rel_grad_norm"] == pytest.approx(n * float(g.norm()), rel=1e-12)
    losses = [float(0.5 * v @ A @ v) for v in [w - r * n * g / g.norm() for r in [0.0] + rhos]]
    assert out["rel_losses"] == pytest.approx(losses, rel=1e-12)
    assert out["rel_step_sizes"] == [0.0] + rhos


def test_landscape_relative_is_invariant_to_weight_scale_before_bn():
    # Scaling the weights before a BN layer leaves the loss unchanged (scale invariance); the raw
    # beta-smoothness changes by about 1/c^2, the relative one does not.
    torch.manual_seed(0)
    bn_cfg = SimpleNamespace(enabled=True, eps=1e-12, momentum=0.1, impl="torch", noise=False)
    model = MLP(8, [6, 5], 3, "sigmoid", bn_cfg, init_std=0.5).double()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (32,), generator=gen)
    loss = nn.functional.cross_entropy
    a = landscape_probe(model, loss, x, y, [0.1, 0.5], rel_step_sizes=[0.01, 0.05])
    scaled = copy.deepcopy(model)
    with torch.no_grad():
        for layer in scaled.hidden:
            layer.affine.weight.mul_(0.1)  # gradients 10x larger, raw curvature 100x
    b = landscape_probe(scaled, loss, x, y, [0.1, 0.5], rel_step_sizes=[0.01, 0.05])
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-9)
    for k in ("rel_beta_smoothness", "rel_grad_predictiveness", "rel_loss_variation", "rel_grad_norm"):
        assert b[k] == pytest.approx(a[k], rel=1e-6), k
    assert b["beta_smoothness"] > 5 * a["beta_smoothness"]


def test_landscape_errors():
    model = _Quadratic(torch.ones(2, dtype=torch.float64))
    A = torch.eye(2, dtype=torch.float64)
    with pytest.raises(ValueError):
        landscape_probe(model, _quad_loss, None, A, [])
    with pytest.raises(ValueError):
        landscape_probe(model, _quad_loss, None, A, [-0.1])
    with pytest.raises(ValueError):
        landscape_probe(model, _quad_loss, None, A, [0.1], rel_step_sizes=[])
