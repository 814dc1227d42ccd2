"""Tests of the scale-free measures of bnexp.train.ics (docs/ics/measurements.md): KS and W1-in-initial-spreads shift with
their sampling-noise floors, gradient ICS per unit of movement, the filter-normalized landscape
(Li et al. 2018), against scipy, hand-computed values and the invariances each one claims."""

from __future__ import annotations

import copy
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from bnexp.train.ics import DistributionShiftTracker, ks_distance, per_unit_ks, per_unit_relative_w1

scipy_stats = pytest.importorskip("scipy.stats")
torch.set_num_threads(1)

SCALE_FREE = ("w1_rel_prev", "w1_rel_first", "ks_prev", "ks_first", "w1_rel_floor", "ks_floor")


# ---------------------------------------------------------------------------- KS distance

def test_ks_matches_scipy_with_ties_and_unequal_sizes():
    gen = torch.Generator().manual_seed(0)
    cases = [(torch.randn(50, generator=gen, dtype=torch.float64), torch.randn(73, generator=gen) * 2 + 0.3),
             # ties within and across the samples: small integers
             (torch.randint(0, 5, (40,), generator=gen).double(), torch.randint(1, 7, (17,), generator=gen).double()),
             (torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0, 1.0])),       # identical: 0
             (torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0, 4.0])),       # disjoint: 1
             (torch.tensor([0.0]), torch.tensor([0.0, 1.0, 2.0, 3.0]))]
    for a, b in cases:
        want = scipy_stats.ks_2samp(a.numpy(), b.numpy()).statistic
        assert ks_distance(a, b) == pytest.approx(want, abs=1e-15)
        assert ks_distance(b, a) == pytest.approx(want, abs=1e-15)
    assert ks_distance(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([1.0, 1.0])) == 0.0
    assert ks_distance(torch.tensor([0.0, 1.0]), torch.tensor([2.0, 3.0, 4.0])) == 1.0
    with pytest.raises(ValueError):
        ks_distance(torch.zeros(0), torch.zeros(3))
    with pytest.raises(ValueError):
        ks_distance(torch.tensor([0.0, math.inf]), torch.zeros(3))


def test_ks_rows_fast_path_equals_pooled_point_definition():
    """Rows without ties inside a sample take the half-search path; it must give bit for bit the
    pooled-point value (both CDFs searched at all n + m points), including ties across samples."""
    from bnexp.train.ics.distribution import _ks_sorted_rows
    gen = torch.Generator().manual_seed(3)
    for n, m in ((1, 1), (1, 7), (13, 5), (200, 200), (64, 150)):
        a = torch.randn(6, n, generator=gen).double().sort(dim=1).values
        b = (torch.randn(6, m, generator=gen) * 1.5 + 0.3).double()
        k = min(n, m) // 2
        b[:3, :k] = a[:3, :k]  # values shared across the samples (not within one)
        b = b.sort(dim=1).values
        z = torch.cat([a, b], dim=1)
        want = (torch.searchsorted(a, z, right=True).double() / n
                - torch.searchsorted(b, z, right=True).double() / m).abs().amax(dim=1)
        got = _ks_sorted_rows(a, b)
        assert torch.equal(got, want)
        for r in range(6):
            assert float(got[r]) == pytest.approx(scipy_stats.ks_2samp(a[r].numpy(), b[r].numpy()).statistic,
                                                  abs=1e-15)


def test_per_unit_ks_matches_scipy_per_unit_then_mean():
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(0, 6, (40, 5), generator=gen).double()  # ties
    b = torch.randn(55, 5, generator=gen, dtype=torch.float64) * 2 + 2
    want = np.mean([scipy_stats.ks_2samp(a[:, j].numpy(), b[:, j].numpy()).statistic for j in range(5)])
    assert per_unit_ks(a, b) == pytest.approx(want, abs=1e-14)
    c1 = torch.randn(6, 3, 4, 4, generator=gen, dtype=torch.float64)  # conv: channels pooled over (P, H, W)
    c2 = torch.randn(5, 3, 2, 4, generator=gen, dtype=torch.float64) + 0.5
    want = np.mean([scipy_stats.ks_2samp(c1[:, j].reshape(-1).numpy(), c2[:, j].reshape(-1).numpy()).statistic
                    for j in range(3)])
    assert per_unit_ks(c1, c2) == pytest.approx(want, abs=1e-14)
    with pytest.raises(ValueError):
        per_unit_ks(a, torch.zeros(4, 3))


def test_per_unit_relative_w1_against_numpy_percentiles_and_scipy_w1():
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(41, 4, generator=gen, dtype=torch.float64) * torch.tensor([0.01, 1.0, 30.0, 2.0])
    b = torch.randn(60, 4, generator=gen, dtype=torch.float64) * 3 + 1
    an, bn = a.numpy(), b.numpy()
    spread = np.percentile(an, 85, axis=0) - np.percentile(an, 15, axis=0)   # numpy's linear interpolation
    want = np.mean([scipy_stats.wasserstein_distance(an[:, j], bn[:, j]) / spread[j] for j in range(4)])
    assert per_unit_relative_w1(a, b) == pytest.approx(want, rel=1e-12)
    spread = np.percentile(an, 90, axis=0) - np.percentile(an, 10, axis=0)
    want = np.mean([scipy_stats.wasserstein_distance(an[:, j], bn[:, j]) / spread[j] for j in range(4)])
    assert per_unit_relative_w1(a, b, (10, 90)) == pytest.approx(want, rel=1e-12)
    # a constant unit (zero spread) is left out of the mean; all constant -> NaN
    a2 = a.clone()
    a2[:, 0] = 3.0
    want = np.mean([scipy_stats.wasserstein_distance(an[:, j], bn[:, j]) /
                    (np.percentile(an[:, j], 85) - np.percentile(an[:, j], 15)) for j in (1, 2, 3)])
    assert per_unit_relative_w1(a2, b) == pytest.approx(want, rel=1e-12)
    assert math.isnan(per_unit_relative_w1(torch.ones(5, 2), torch.zeros(5, 2)))
    with pytest.raises(ValueError):
        per_unit_relative_w1(a, b, (85, 15))


# ---------------------------------------------------------------------------- tracker: scale-free keys, floors

def _sequence(seed=3, rows=3000, units=20):
    """Three snapshots of a layer whose units have very different scales and drift."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-3, 1, units, dtype=torch.float64)
    x0 = torch.randn(rows, units, generator=gen, dtype=torch.float64) * scale
    x1 = (torch.randn(rows, units, generator=gen, dtype=torch.float64) * 1.3 + 0.4) * scale
    x2 = (torch.rand(rows, units, generator=gen, dtype=torch.float64) * 4 - 1) * scale
    return [x0, x1, x2]


def _run(xs, max_values=2000, **kw):
    tr = DistributionShiftTracker(max_values=max_values, **kw)
    return [tr.update({"l": x.float()}, step=10 * i)["l"] for i, x in enumerate(xs)]


def test_tracker_records_every_key_and_first_record():
    recs = _run(_sequence())
    assert all(set(r) == set(DistributionShiftTracker.KEYS) for r in recs)
    first = recs[0]
    assert all(first[k] == 0.0 for k in DistributionShiftTracker.KEYS if not k.endswith("floor"))
    assert first["w1_floor"] > 0 and first["ks_floor"] > 0  # 2000 // 20 = 100 of 3000 rows per unit
    assert recs[1]["ks_first"] > recs[1]["ks_floor"] and recs[2]["ks_first"] > 3 * recs[2]["ks_floor"]


@pytest.mark.parametrize("per_unit", [False, True])
def test_scale_free_measures_are_invariant_to_rescaling_the_values(per_unit):
    xs = _sequence()
    c = torch.linspace(0.01, 50.0, 20, dtype=torch.float64) if per_unit else torch.tensor(3.7, dtype=torch.float64)
    a, b = _run(xs), _run([c * x for x in xs])
    for ra, rb in zip(a, b):
        for k in SCALE_FREE:
            assert rb[k] == pytest.approx(ra[k], rel=1e-5, abs=1e-12), k
    if not per_unit:  # the raw W1 and its floor scale with c
        for ra, rb in zip(a[1:], b[1:]):
            for k in ("w1_prev", "w1_first", "w1_floor"):
                assert rb[k] == pytest.approx(3.7 * ra[k], rel=1e-5), k
    assert a[2]["w1_rel_first"] > 0 and a[2]["ks_first"] > 0


def test_ks_is_invariant_to_a_monotone_map_w1_rel_is_not():
    xs = _sequence(units=6)
    m = xs[0].abs().amax(dim=0)  # one strictly increasing, non-linear map per unit, the same at every record
    a, b = _run(xs), _run([torch.exp(x / m) for x in xs])
    for k in ("ks_prev", "ks_first", "ks_floor"):
        assert b[2][k] == pytest.approx(a[2][k], abs=1e-12), k
    assert b[2]["w1_rel_first"] != pytest.approx(a[2]["w1_rel_first"], rel=1e-2)


@pytest.mark.parametrize("k", [0.5, 2.0, 7.0])
def test_a_shift_by_k_initial_spreads_gives_w1_rel_k(k):
    x0 = _sequence()[0]
    x = x0.float().double()  # the tracker keeps float32 values
    spread = torch.quantile(x, 0.85, dim=0) - torch.quantile(x, 0.15, dim=0)
    for max_values in (1_000_000, 2000):  # whole values, and subsampled (100 of 3000 rows per unit)
        tr = DistributionShiftTracker(max_values=max_values, spread_max_values=1_000_000)
        tr.update({"l": x}, step=0)
        r = tr.update({"l": x + k * spread}, step=1)["l"]
        assert r["w1_rel_first"] == pytest.approx(k, rel=1e-5) and r["w1_rel_prev"] == pytest.approx(k, rel=1e-5)
        assert r["ks_first"] > 0.1
    # the initial spread is the one of the TensorBoard chart's percentiles (here 10-90)
    tr = DistributionShiftTracker(max_values=1_000_000, spread_percentiles=(10, 90))
    tr.update({"l": x}, step=0)
    s90 = torch.quantile(x, 0.9, dim=0) - torch.quantile(x, 0.1, dim=0)
    assert tr.update({"l": x + k * s90}, step=1)["l"]["w1_rel_first"] == pytest.approx(k, rel=1e-5)


def test_one_distribution_sampled_twice_is_at_the_floor():
    gen = torch.Generator().manual_seed(4)
    x, y = (torch.randn(4000, 50, generator=gen) for _ in range(2))  # two samples of one distribution
    tr = DistributionShiftTracker(max_values=10_000)                 # 200 of 4000 rows per unit
    tr.update({"l": x}, step=0)
    r = tr.update({"l": y}, step=1)["l"]
    for k in ("w1", "w1_rel", "ks"):
        assert 0.8 < r[f"{k}_first"] / r[f"{k}_floor"] < 1.25, k
    # the floor is the statistic's size for two samples of 200: a Monte Carlo of independent
    # standard normal samples by numpy and scipy
    rng = np.random.default_rng(0)
    ks = np.mean([scipy_stats.ks_2samp(rng.standard_normal(200), rng.standard_normal(200)).statistic
                  for _ in range(2000)])
    w1 = np.mean([scipy_stats.wasserstein_distance(rng.standard_normal(200), rng.standard_normal(200))
                  for _ in range(2000)])
    assert r["ks_floor"] == pytest.approx(ks, rel=0.1) and r["w1_floor"] == pytest.approx(w1, rel=0.1)
    # identical values: the statistics are 0, within the floor
    r = tr.update({"l": y}, step=2)["l"]
    assert r["w1_prev"] == 0.0 and r["ks_prev"] == 0.0 and r["w1_rel_prev"] == 0.0 and r["ks_floor"] > 0


def test_floor_is_zero_without_subsampling_and_reproducible():
    xs = _sequence()
    recs = _run(xs, max_values=10 ** 6)  # every row kept
    assert all(r[k] == 0.0 for r in recs for k in ("w1_floor", "w1_rel_floor", "ks_floor"))
    rng = torch.get_rng_state()
    a, b = _run(xs), _run(xs)
    assert a == b and torch.equal(rng, torch.get_rng_state())  # own generator: global RNG untouched
    assert _run(xs, seed=1)[1]["ks_floor"] != a[1]["ks_floor"]


def test_constant_units_are_left_out_of_w1_rel():
    x = _sequence()[0].float()
    x[:, 0] = 1.0  # constant at the first snapshot: no initial spread
    tr = DistributionShiftTracker(max_values=10 ** 6)
    tr.update({"l": x}, step=0)
    r = tr.update({"l": x + 1.0}, step=1)["l"]
    spread = torch.quantile(x[:, 1:].double(), 0.85, dim=0) - torch.quantile(x[:, 1:].double(), 0.15, dim=0)
    assert r["w1_rel_first"] == pytest.approx(float((1.0 / spread).mean()), rel=1e-5)
    tr = DistributionShiftTracker(max_values=10 ** 6)
    r0 = tr.update({"l": torch.ones(10, 3)}, step=0)["l"]
    r1 = tr.update({"l": torch.randn(10, 3)}, step=1)["l"]
    assert math.isnan(r0["w1_rel_first"]) and math.isnan(r1["w1_rel_first"]) and math.isnan(r1["w1_rel_floor"])
    assert r1["w1_first"] > 0 and r1["ks_first"] > 0


def test_checkpoint_keeps_the_initial_spreads():
    xs = _sequence()
    tr = DistributionShiftTracker(max_values=2000)
    tr.update({"l": xs[0]}, step=0)
    tr.update({"l": xs[1]}, step=10)
    state = copy.deepcopy(tr.state_dict())
    tr2 = DistributionShiftTracker()
    tr2.load_state_dict(state)
    assert tr.update({"l": xs[2]}, step=20) == tr2.update({"l": xs[2]}, step=20)
    # a checkpoint from before the scale-free measures: spreads from the stored per-unit values
    old = copy.deepcopy(state)
    for k in ("spread", "spread_percentiles", "spread_max_values", "seed"):
        old.pop(k)
    tr3 = DistributionShiftTracker()
    tr3.load_state_dict(old)
    u = state["first"]["l"]["units"].double()
    want = torch.quantile(u, 0.85, dim=0) - torch.quantile(u, 0.15, dim=0)
    assert torch.allclose(tr3.spread["l"], want, rtol=1e-12)


# ---------------------------------------------------------------------------- monitor: the records and the layout

def test_monitor_records_the_scale_free_keys_with_the_charts_spread():
    from bnexp.nets.models import MLP
    from bnexp.train.monitor import ShiftMonitor

    torch.manual_seed(0)
    model = MLP(12, [8, 6], 3, "relu", SimpleNamespace(enabled=False), init_std=0.3)
    probe = torch.randn(200, 12, generator=torch.Generator().manual_seed(1))
    mon = ShiftMonitor(model, probe, [10, 50, 90], histograms=False, shift_max_values=10 ** 6)
    x0 = mon.capture()
    mon.record(0)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5).add_(0.1)
    x1 = mon.capture()
    rec = mon.record(1)["shift_metrics"]
    for name in ("layer1", "layer2"):
        a, b = x0[name].double().numpy(), x1[name].double().numpy()
        spread = np.percentile(a, 90, axis=0) - np.percentile(a, 10, axis=0)  # the monitor's outer percentiles
        w1 = [scipy_stats.wasserstein_distance(a[:, j], b[:, j]) for j in range(a.shape[1])]
        ks = [scipy_stats.ks_2samp(a[:, j], b[:, j]).statistic for j in range(a.shape[1])]
        r = rec[name]
        assert r["w1_rel_first"] == pytest.approx(np.mean(np.array(w1) / spread), rel=1e-5)
        assert r["ks_first"] == pytest.approx(np.mean(ks), abs=1e-12)
        assert r["w1_floor"] == r["ks_floor"] == r["w1_rel_floor"] == 0.0  # nothing subsampled
    layout = mon.custom_scalars_layout()["internal covariate shift (unitless)"]
    # a margin chart each: the value as the line, the band from the noise floor up to the value
    charts = [v for k, v in layout.items() if k.startswith("layer1: KS") or k.startswith("layer1: W1")]
    assert charts == [["Margin", ["ics/layer1/ks_first", "ics/layer1/ks_floor", "ics/layer1/ks_first"]],
                      ["Margin", ["ics/layer1/w1_rel_first", "ics/layer1/w1_rel_floor", "ics/layer1/w1_rel_first"]]]


# ---------------------------------------------------------------------------- gradient ICS per unit of movement

def _linear_with_bias(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4, bias=True), nn.Linear(4, 2, bias=False)).double()


def _sse(out, target):
    return 0.5 * ((out - target) ** 2).sum()


def _hand_gradients(W1, b1, W2, X, T):
    """SSE of out = (X W1^T + b1) W2^T: (G_W1, G_b1, G_W2) in closed form."""
    H = X @ W1.T + b1
    R = H @ W2.T - T
    back = R @ W2                      # dL/dH
    return back.T @ X, back.sum(0), R.T @ H


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_move_rel_is_the_earlier_layers_relative_sgd_step(wd):
    model = _linear_with_bias()
    gen = torch.Generator().manual_seed(5)
    X = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    T = torch.randn(6, 2, generator=gen, dtype=torch.float64)
    lr = 0.05
    opt = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=wd)
    W1, b1, W2 = (p.detach().clone() for p in (model[0].weight, model[0].bias, model[1].weight))
    G_W1, G_b1, G_W2 = _hand_gradients(W1, b1, W2, X, T)
    # SGD: Delta = -lr (G + wd W) for layer 1's weight and bias, the earlier layers of layer 2
    dW1, db1 = -lr * (G_W1 + wd * W1), -lr * (G_b1 + wd * b1)
    move = math.sqrt(float(dW1.pow(2).sum() + db1.pow(2).sum())) / math.sqrt(float(W1.pow(2).sum() + b1.pow(2).sum()))
    G_W2_after = _hand_gradients(W1 + dW1, b1 + db1, W2, X, T)[2]  # G' of layer 2
    l2_rel = float((G_W2 - G_W2_after).norm() / G_W2.norm())

    from bnexp.train.ics import gradient_ics
    out = gradient_ics(model, _sse, X, T, opt, [["0.weight", "0.bias"], ["1.weight"]], ["0.weight", "1.weight"])
    assert out[1]["move_rel"] == pytest.approx(move, rel=1e-10)
    assert out[1]["l2_rel"] == pytest.approx(l2_rel, rel=1e-9)
    assert out[1]["l2_rel_per_move"] == pytest.approx(l2_rel / move, rel=1e-9)
    assert math.isnan(out[0]["move_rel"]) and math.isnan(out[0]["l2_rel_per_move"])  # no earlier layers


def test_l2_rel_per_move_does_not_vanish_with_the_step():
    """A network that barely moves (a small rate) scores a small l2_rel; per unit of movement it does not."""
    from bnexp.train.ics import gradient_ics

    gen = torch.Generator().manual_seed(6)
    X = torch.randn(8, 3, generator=gen, dtype=torch.float64)
    T = torch.randn(8, 2, generator=gen, dtype=torch.float64)
    groups, weights = [["0.weight", "0.bias"], ["1.weight"]], ["0.weight", "1.weight"]
    res = {}
    for lr in (1e-2, 1e-5):
        m = _linear_with_bias(1)
        res[lr] = gradient_ics(m, _sse, X, T, torch.optim.SGD(m.parameters(), lr=lr), groups, weights)[1]
    assert res[1e-5]["l2_rel"] < 2e-3 * res[1e-2]["l2_rel"]
    assert res[1e-5]["move_rel"] == pytest.approx(1e-3 * res[1e-2]["move_rel"], rel=1e-9)  # SGD: step ~ lr
    assert res[1e-5]["l2_rel_per_move"] == pytest.approx(res[1e-2]["l2_rel_per_move"], rel=0.05)
    # the whole earlier parameter set, not only the weight: a frozen-at-zero earlier layer moves nothing
    m = _linear_with_bias(1)
    with torch.no_grad():
        m[0].weight.zero_()
        m[0].bias.zero_()
    r = gradient_ics(m, _sse, X, T, torch.optim.SGD([m[1].weight], lr=0.1), groups, weights)[1]
    assert math.isnan(r["move_rel"]) and math.isnan(r["l2_rel_per_move"])


# ---------------------------------------------------------------------------- filter-normalized landscape

def test_filter_normalize_gives_every_filter_its_weight_filters_norm():
    from bnexp.train.ics import filter_normalize, filter_norms

    gen = torch.Generator().manual_seed(7)
    weights = [torch.randn(5, 3, generator=gen), torch.randn(5, generator=gen),          # Linear weight, bias
               torch.randn(4, 2, 3, 3, generator=gen), torch.ones(4)]                    # Conv weight, BN gamma
    weights[0][2] = 0.0                                                                  # a dead filter
    direction = [torch.randn(w.shape, generator=gen, dtype=torch.float64) * 7 for w in weights]
    direction[2][1] = 0.0                                                                # a zero direction filter
    d = filter_normalize(direction, weights)
    for di, w, raw in zip(d, weights, direction):
        if w.dim() < 2:
            assert torch.equal(di, torch.zeros_like(di))  # biases and BN parameters are not moved
            continue
        want = torch.stack([w[f].double().norm() for f in range(w.shape[0])])
        have = torch.stack([di[f].norm() for f in range(w.shape[0])])
        if w.dim() == 4:
            want[1] = 0.0
        assert torch.allclose(have, want, rtol=1e-12, atol=0), have - want
        assert torch.allclose(filter_norms(w), torch.stack([w[f].double().norm() for f in range(w.shape[0])]))
        # each filter keeps its direction
        for f in range(w.shape[0]):
            if have[f] > 0:
                cos = float((di[f] * raw[f]).sum() / (di[f].norm() * raw[f].norm()))
                assert cos == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError):
        filter_normalize(direction[:1], weights)
    with pytest.raises(ValueError):
        filter_norms(torch.ones(3))


class _QuadraticMatrix(nn.Module):
    """L = 1/2 vec(W)^T A vec(W) + 1/2 ||b - 1||^2 with a (2, 3) weight W (two filters) and a bias b."""

    def __init__(self, W, b):
        super().__init__()
        self.W = nn.Parameter(W.clone())
        self.b = nn.Parameter(b.clone())

    def forward(self, x):
        return self.W, self.b


def _quad_matrix_loss(out, A):
    W, b = out
    w = W.reshape(-1)
    return 0.5 * w @ A @ w + 0.5 * ((b - 1) ** 2).sum()


def test_filter_normalized_probe_quadratic_closed_form():
    from bnexp.train.ics import landscape_probe

    gen = torch.Generator().manual_seed(8)
    Q, _ = torch.linalg.qr(torch.randn(6, 6, generator=gen, dtype=torch.float64))
    A = Q @ torch.diag(torch.tensor([0.5, 1.0, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)) @ Q.T
    W = torch.tensor([[1.0, -2.0, 0.5], [0.2, 0.3, -0.1]], dtype=torch.float64)
    b = torch.tensor([0.3, -0.4], dtype=torch.float64)
    alphas = [0.01, 0.05, 0.2]
    out = landscape_probe(_QuadraticMatrix(W, b), _quad_matrix_loss, None, A, [0.1], fn_step_sizes=alphas)
    g = (A @ W.reshape(-1)).reshape(2, 3)
    n = W.norm(dim=1, keepdim=True)
    d = g / g.norm(dim=1, keepdim=True) * n              # each gradient filter rescaled to its weight's norm
    bias_loss = 0.5 * float(((b - 1) ** 2).sum())        # b is not moved
    losses = [0.5 * float((W - a * d).reshape(-1) @ A @ (W - a * d).reshape(-1)) + bias_loss for a in [0.0] + alphas]
    assert out["fn_step_sizes"] == [0.0] + alphas
    assert out["fn_losses"] == pytest.approx(losses, rel=1e-12)
    assert out["fn_loss_variation"] == pytest.approx(max(losses) - min(losses), rel=1e-10)
    # grad_q = n_f grad_f; moving by -alpha d changes it by -alpha n_f (A d)_f; ||d_q|| = alpha sqrt(2)
    Ad = (A @ d.reshape(-1)).reshape(2, 3)
    assert out["fn_grad_predictiveness"] == pytest.approx(max(alphas) * float((n * Ad).norm()), rel=1e-10)
    assert out["fn_beta_smoothness"] == pytest.approx(float((n * Ad).norm()) / math.sqrt(2), rel=1e-10)
    # the random direction: filter-normalized standard normal draw of a generator seeded with fn_seed
    r = torch.Generator().manual_seed(0)
    rW = torch.randn((2, 3), generator=r, dtype=torch.float64)
    dr = rW / rW.norm(dim=1, keepdim=True) * n
    rlosses = [0.5 * float((W + a * dr).reshape(-1) @ A @ (W + a * dr).reshape(-1)) + bias_loss
               for a in [0.0] + alphas]
    assert out["fn_random_losses"] == pytest.approx(rlosses, rel=1e-12)
    assert out["fn_random_loss_variation"] == pytest.approx(max(rlosses) - min(rlosses), rel=1e-10)
    other = landscape_probe(_QuadraticMatrix(W, b), _quad_matrix_loss, None, A, [0.1], fn_step_sizes=alphas, fn_seed=1)
    assert other["fn_random_losses"] != out["fn_random_losses"] and other["fn_losses"] == out["fn_losses"]
    with pytest.raises(ValueError):
        landscape_probe(_QuadraticMatrix(W, b), _quad_matrix_loss, None, A, [0.1], fn_step_sizes=[-1.0])


FN_KEYS = ("fn_loss_variation", "fn_grad_predictiveness", "fn_beta_smoothness", "fn_losses",
           "fn_random_loss_variation", "fn_random_losses")


def _relu_net_and_batch():
    from bnexp.nets.models import MLP

    torch.manual_seed(0)
    model = MLP(8, [6, 5], 3, "relu", SimpleNamespace(enabled=False), init_std=0.5).double()
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, 8, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (32,), generator=gen)
    return model, x, y


def _probe(model, x, y):
    from bnexp.train.ics import landscape_probe

    return landscape_probe(model, nn.functional.cross_entropy, x, y, [0.1, 0.5], rel_step_sizes=[0.01, 0.05],
                           fn_step_sizes=[0.01, 0.05, 0.2])


def _assert_fn_equal(a, b):
    for k in FN_KEYS:
        assert b[k] == pytest.approx(a[k], rel=1e-7, abs=1e-12), k


def test_filter_normalized_measures_are_invariant_to_relu_rescaling_raw_are_not():
    model, x, y = _relu_net_and_batch()
    a = _probe(model, x, y)
    scaled = copy.deepcopy(model)
    c = 8.0
    with torch.no_grad():  # relu(c z) = c relu(z): layer 1 (weight and bias) by c, layer 2's weight by 1/c
        scaled.hidden[0].affine.weight.mul_(c)
        scaled.hidden[0].affine.bias.mul_(c)
        scaled.hidden[1].affine.weight.div_(c)
    b = _probe(scaled, x, y)
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-12)  # the same function
    _assert_fn_equal(a, b)
    assert a["fn_loss_variation"] > 0 and a["fn_beta_smoothness"] > 0 and a["fn_random_loss_variation"] > 0
    assert not b["beta_smoothness"] == pytest.approx(a["beta_smoothness"], rel=0.1)
    assert not b["loss_variation"] == pytest.approx(a["loss_variation"], rel=0.01)
    # whole tensors were rescaled, so the per-tensor relative probe is unchanged too (docs/ics/measurements.md);
    # what sets the two apart is a rescale per filter (next test)
    for k in ("rel_loss_variation", "rel_grad_predictiveness", "rel_beta_smoothness"):
        assert b[k] == pytest.approx(a[k], rel=1e-7), k


def test_filter_normalized_measures_are_invariant_to_per_filter_rescaling_before_bn_rel_are_not():
    from bnexp.nets.models import MLP

    torch.manual_seed(0)
    bn_cfg = SimpleNamespace(enabled=True, eps=1e-12, momentum=0.1, impl="torch", noise=False)
    model = MLP(8, [6, 5], 3, "relu", bn_cfg, init_std=0.5).double()
    _, x, y = _relu_net_and_batch()
    a = _probe(model, x, y)
    scaled = copy.deepcopy(model)
    with torch.no_grad():  # every unit's row before BN by its own factor: BN normalizes it away
        for layer in scaled.hidden:
            w = layer.affine.weight
            w.mul_(torch.logspace(-1, 1, w.shape[0], dtype=torch.float64)[:, None])
    b = _probe(scaled, x, y)
    assert b["loss"] == pytest.approx(a["loss"], rel=1e-9)
    for k in FN_KEYS:
        assert b[k] == pytest.approx(a[k], rel=1e-6, abs=1e-12), k
    assert not b["rel_beta_smoothness"] == pytest.approx(a["rel_beta_smoothness"], rel=0.05)
