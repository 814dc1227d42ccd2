"""Tests of the scale-free measures of bnexp.ics (issue 20): KS and W1-in-initial-spreads shift with
their sampling-noise floors, gradient ICS per unit of movement, the filter-normalized landscape
(Li et al. 2018), against scipy, hand-computed values and the invariances each one claims."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from bnexp.ics import DistributionShiftTracker, ks_distance, per_unit_ks, per_unit_relative_w1

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
