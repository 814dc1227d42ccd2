"""The seed-mean interval (bnexp.analysis.interval): hand-computed values, then coverage by simulation.

Coverage: 2,000 simulated studies at n = 3 and n = 5 with a known true value, each judged by the
public function. For a proportion of 2,000 near 0.95 the sampling std is sqrt(0.95 * 0.05 / 2000) =
0.0049, so an exact 95% method lands in [0.93, 0.97] (4 std either side) and a method below 0.90 fails.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from bnexp.analysis.interval import SeedInterval, seed_mean_interval, seed_values, t_bounds, t_quantile
from bnexp.report.fmt import format_interval
from bnexp.analysis.rules import Censored

STUDIES = 2000
# Student-t table (e.g. Casella & Berger, Table in App. or any printed table): t_{0.975, df}
T_TABLE = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262}


def ratio_interval(numerators, denominators, numerator_censored=None, denominator_censored=None) -> SeedInterval:
    """The report's seed-paired ratio (:class:`Censored` division, a value censored at the budget a lower
    bound) and its log-scale interval (:func:`bnexp.analysis.interval.seed_values`)."""
    def c(v, cens, i):
        return Censored(float(v), "lower" if cens is not None and cens[i] else "exact")

    return seed_values({i: c(a, numerator_censored, i) / c(b, denominator_censored, i)
                        for i, (a, b) in enumerate(zip(numerators, denominators))}, "log")[2]


@pytest.mark.parametrize("df", sorted(T_TABLE))
def test_t_quantile_matches_the_printed_table(df):
    assert t_quantile(0.975, df) == pytest.approx(T_TABLE[df], abs=1e-3)


def test_mnist_97_example_raw_and_log_by_hand():
    """The per-seed speedups 1.69, 1.5, 3.08 (MNIST, 97%): the raw t interval is the [-0.05, 4.23] the
    review computed; the log-ratio one is exp(mean log +- 4.303 s_log / sqrt 3), written out here."""
    r = [1.69, 1.5, 3.08]
    raw = seed_mean_interval(r)
    mean = sum(r) / 3
    s = math.sqrt(sum((v - mean) ** 2 for v in r) / 2)
    assert raw.estimate == pytest.approx(2.09, abs=0.005)
    assert (raw.low, raw.high) == pytest.approx((mean - 4.303 * s / math.sqrt(3), mean + 4.303 * s / math.sqrt(3)),
                                                abs=2e-3)
    assert raw.low == pytest.approx(-0.05, abs=0.01) and raw.high == pytest.approx(4.23, abs=0.01)
    logs = [math.log(v) for v in r]
    m = sum(logs) / 3
    sl = math.sqrt(sum((v - m) ** 2 for v in logs) / 2)
    iv = ratio_interval([1.69, 3.0, 3.08], [1.0, 2.0, 1.0])
    assert iv.estimate == pytest.approx(math.exp(m), rel=1e-9)  # the geometric mean
    assert iv.low == pytest.approx(math.exp(m - 4.303 * sl / math.sqrt(3)), rel=1e-3)
    assert iv.high == pytest.approx(math.exp(m + 4.303 * sl / math.sqrt(3)), rel=1e-3)
    assert (iv.seed_min, iv.seed_max) == (1.5, 3.08)
    assert iv.side_of(1.0) == "straddles" and raw.side_of(1.0) == "straddles"
    assert format_interval(iv, "x") == "1.98x, 95% t interval [0.761x, 5.17x]; per seed 1.5x to 3.08x (n = 3)"


def test_side_of_and_equal_values():
    iv = seed_mean_interval([2.0, 2.2, 2.1, 2.05, 2.15], scale="log")
    assert iv.side_of(1.0) == "above" and iv.side_of(3.0) == "below" and iv.side_of(2.1) == "straddles"
    same = seed_mean_interval([0.5, 0.5, 0.5])
    assert (same.estimate, same.low, same.high) == (0.5, 0.5, 0.5)


def test_fewer_than_two_seeds_has_no_interval():
    iv = seed_mean_interval([1.7], scale="log")
    assert iv.estimate == pytest.approx(1.7) and iv.low is None and iv.high is None
    assert iv.side_of(1.0) == "straddles" and "fewer than 2 seeds" in format_interval(iv, "x")


def test_censored_sides_are_open_never_exact():
    # seed 2 of no BN never reached the target: its ratio is only a lower bound
    iv = ratio_interval([1690, 1500, 3080], [1000, 1000, 1000], numerator_censored=[False, False, True])
    assert iv.high is None and iv.high_open and not iv.low_open and iv.low is not None
    assert iv.estimate_bound == ">=" and iv.seed_max_bound == ">=" and iv.n_censored == 1
    text = format_interval(iv, "x")
    assert text.startswith(">= 1.98x") and "open" in text and ">= 3.08x" in text
    assert iv.side_of(0.5) == "above" and iv.side_of(100.0) == "straddles"  # an open side is never "below"
    # BN's seed never reached it: an upper bound, the lower side open
    up = ratio_interval([1690, 1500, 3080], [1000, 1000, 1000], denominator_censored=[True, False, False])
    assert up.low is None and up.low_open and up.high is not None and up.estimate_bound == "<="
    # neither reached: the ratio is unknown, no interval at all
    none = ratio_interval([1690, 1500, 3080], [1000, 1000, 1000], [True, False, False], [True, False, False])
    assert none.estimate is None and none.low is None and none.high is None and none.n == 3
    both = seed_mean_interval([1.0, 2.0, 3.0], ["<=", "", ">="])
    assert both.low is None and both.high is None and "no 95% interval" in format_interval(both)


@pytest.mark.parametrize("bad, match", [
    (dict(values=[]), "at least one seed"),
    (dict(values=[1.0, -1.0], scale="log"), "> 0"),
    (dict(values=[1.0, float("nan")]), "finite"),
    (dict(values=[1.0, 2.0], censored=[">"]), "one entry|entries"),
    (dict(values=[1.0, 2.0], censored=[">", ""]), "must be one of"),
    (dict(values=[1.0, 2.0], scale="sqrt"), "scale"),
    (dict(values=[1.0, 2.0], level=95), "level"),
])
def test_bad_input_is_a_value_error(bad, match):
    with pytest.raises(ValueError, match=match):
        seed_mean_interval(**bad)


def _coverage(intervals: list[SeedInterval], truth: float) -> float:
    return float(np.mean([(iv.low is None or iv.low <= truth) and (iv.high is None or truth <= iv.high)
                          for iv in intervals]))


@pytest.mark.parametrize("n", [3, 5])
def test_coverage_log_normal_ratios(n):
    """Per-seed ratio = no-BN steps / BN steps, both log-normal: the log ratio is N(log 2, 0.35^2 * 2),
    so the true ratio (median, geometric mean) is 2. The 95% interval covers it 93-97% of the time;
    the per-seed range covers it only 1 - 2 * 0.5^n of the time (0.75 at n = 3), the old bootstrap's
    problem."""
    rng = np.random.default_rng(100 + n)
    no_bn = np.exp(rng.normal(math.log(2000), 0.35, (STUDIES, n)))
    bn = np.exp(rng.normal(math.log(1000), 0.35, (STUDIES, n)))
    ivs = [ratio_interval(a, b) for a, b in zip(no_bn, bn)]
    assert 0.93 <= _coverage(ivs, 2.0) <= 0.97
    in_range = np.mean([iv.seed_min <= 2.0 <= iv.seed_max for iv in ivs])
    assert in_range == pytest.approx(1 - 2 * 0.5 ** n, abs=0.03)
    assert all(iv.low is not None and iv.high is not None and iv.estimate_bound == "" for iv in ivs)


def test_coverage_of_the_cifar_headline_over_decision_and_held_out_seeds():
    """The CIFAR-10 headline's interval over every seed (docs/cifar/PLAN.md: decision seeds 0, 1 and held-out seed 2;
    bnexp.analysis.frontier.held_out): n = 3 per-seed S(a*_s) with log S ~ N(log 3.7, 0.2^2), so the true
    geometric mean is 3.7. Over 20,000 studies, the sampling std of the coverage is sqrt(0.95 * 0.05 / 20000) =
    0.0015: an exact 95% method lands in [0.94, 0.96] (6 std either side)."""
    rng = np.random.default_rng(37)
    draws = np.exp(rng.normal(math.log(3.7), 0.2, (20000, 3)))
    ivs = [seed_values({s: float(v) for s, v in enumerate(row)}, "log")[2] for row in draws]
    assert all(iv.n == 3 and iv.low is not None and iv.high is not None for iv in ivs)
    assert 0.94 <= _coverage(ivs, 3.7) <= 0.96


@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("censored_share", [0.3, 0.6])
def test_coverage_with_no_bn_seeds_censored_at_a_budget(n, censored_share):
    """As above, but a no-BN run that has not reached the target by the budget stops there: its steps
    are the budget and its ratio a lower bound. The budget is set so that ``censored_share`` of the
    no-BN seeds hit it. The interval (upper side open whenever a seed is censored) still covers the
    true ratio 2 at least 90% of the time, and a censored side is never written as a number."""
    rng = np.random.default_rng(200 + n + int(10 * censored_share))
    no_bn = np.exp(rng.normal(math.log(2000), 0.35, (STUDIES, n)))
    bn = np.exp(rng.normal(math.log(1000), 0.35, (STUDIES, n)))
    from statistics import NormalDist
    budget = 2000 * math.exp(0.35 * NormalDist().inv_cdf(1 - censored_share))
    cens = no_bn > budget
    assert cens.mean() == pytest.approx(censored_share, abs=0.03)
    ivs = [ratio_interval(np.minimum(a, budget), b, c) for a, b, c in zip(no_bn, bn, cens)]
    assert _coverage(ivs, 2.0) >= 0.90
    for iv, c in zip(ivs, cens):
        assert iv.n_censored == int(c.sum())
        if c.any():
            assert iv.high is None and iv.high_open and iv.estimate_bound == ">="
            text = format_interval(iv, "x")
            assert ", open:" in text and "t interval [" in text
        else:
            assert iv.high is not None and not iv.high_open and iv.estimate_bound == ""
        assert iv.low is not None and not iv.low_open


@pytest.mark.parametrize("n", [3, 5])
def test_coverage_bn_seeds_censored_open_the_lower_side(n):
    """BN runs censored at a budget (a BN seed that never reached the target): ratios are upper bounds,
    the lower side is open, coverage >= 90%."""
    rng = np.random.default_rng(300 + n)
    no_bn = np.exp(rng.normal(math.log(2000), 0.35, (STUDIES, n)))
    bn = np.exp(rng.normal(math.log(1000), 0.35, (STUDIES, n)))
    budget = 1200.0
    cens = bn > budget
    ivs = [ratio_interval(a, np.minimum(b, budget), denominator_censored=c) for a, b, c in zip(no_bn, bn, cens)]
    assert _coverage(ivs, 2.0) >= 0.90
    assert all((iv.low is None) == bool(c.any()) and iv.high is not None for iv, c in zip(ivs, cens))


@pytest.mark.parametrize("n", [3, 5])
def test_coverage_raw_differences(n):
    """Accuracy differences (BN - no BN, in points) drawn N(0.4, 0.3^2): the raw t interval covers 0.4
    93-97% of the time."""
    rng = np.random.default_rng(400 + n)
    d = rng.normal(0.4, 0.3, (STUDIES, n))
    ivs = [seed_mean_interval(row) for row in d]
    assert 0.93 <= _coverage(ivs, 0.4) <= 0.97


def test_t_bounds_vectorised_agrees_with_the_per_study_function():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(50, 4))
    mean, lo, hi = t_bounds(x)
    for i in (0, 17, 49):
        iv = seed_mean_interval(x[i])
        assert (iv.estimate, iv.low, iv.high) == pytest.approx((mean[i], lo[i], hi[i]))
    with pytest.raises(ValueError, match="at least 2"):
        t_bounds(np.ones((3, 1)))


# ----- coverage on data shaped like the steps-to-target ratios (docs/development.md, "The interval") -----
# Steps to a target are read on the 250-step evaluation grid (a run reaching it between two evaluations
# counts at the later one); seeds may be heavy-tailed (Student t with 3 degrees of freedom on the log
# scale) and 10% of no-BN seeds may be outliers (3x slower). The estimand is the population's geometric
# mean ratio of the grid-read steps, computed on 2,000,000 draws. One-sided misses are checked against
# their nominal 2.5% each: a proportion of 2,000 near 0.025 has sampling std 0.0035, so 0.036 is 3 std.

GRID = 250


def _draw(rng, shape, tails: str) -> np.ndarray:
    """Log-scale seed noise with std 0.35: normal, or Student t(3) scaled to the same variance."""
    if tails == "normal":
        return rng.normal(0.0, 0.35, shape)
    return 0.35 * rng.standard_t(3, shape) / math.sqrt(3.0)


def _steps(rng, shape, tails: str, outliers: float) -> tuple[np.ndarray, np.ndarray]:
    """(no-BN steps, BN steps) to a target, true ratio 2 before the grid and the outliers."""
    no_bn = np.exp(math.log(2000) + _draw(rng, shape, tails)) * np.where(rng.random(shape) < outliers, 3.0, 1.0)
    bn = np.exp(math.log(1000) + _draw(rng, shape, tails))
    return np.ceil(no_bn / GRID) * GRID, np.ceil(bn / GRID) * GRID


def _truth(tails: str, outliers: float) -> float:
    no_bn, bn = _steps(np.random.default_rng(99), (2_000_000,), tails, outliers)
    return float(np.exp(np.mean(np.log(no_bn / bn))))


def _misses(bounds, truth: float) -> tuple[float, float]:
    """(share of intervals wholly above the truth, share wholly below); an open side never misses."""
    low = np.mean([lo is not None and lo > truth for lo, _ in bounds])
    high = np.mean([hi is not None and hi < truth for _, hi in bounds])
    return float(low), float(high)


@pytest.mark.slow  # 16,000 simulated studies and a 2,000,000-draw estimand per case
@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("tails, outliers", [("normal", 0.0), ("t3", 0.0), ("normal", 0.1), ("t3", 0.1)])
def test_coverage_on_the_evaluation_grid_with_heavy_tails_and_outlier_seeds(n, tails, outliers):
    """Two-sided coverage stays within [0.93, 0.975] in every case. Each side misses at most 3 sampling
    std above its nominal 2.5%, except the upper side with 10% outlier seeds: the outliers skew the
    seed ratios to the right, and the interval's upper end falls below the truth 3.4-4.4% of the time
    (measured: n = 3 3.5% normal / 3.4% t3; n = 5 3.5% / 4.4%). That shortfall is recorded here and in
    docs/development.md, not hidden by a wider tolerance: the test holds it under 5%."""
    rng = np.random.default_rng(500 + 10 * n + int(100 * outliers) + (tails == "t3"))
    no_bn, bn = _steps(rng, (STUDIES, n), tails, outliers)
    truth = _truth(tails, outliers)
    ivs = [ratio_interval(a, b) for a, b in zip(no_bn, bn)]
    low, high = _misses([(iv.low, iv.high) for iv in ivs], truth)
    assert 0.93 <= 1 - low - high <= 0.975, (low, high)
    assert low <= 0.036, low
    assert high <= (0.05 if outliers else 0.036), high


@pytest.mark.slow  # as above
@pytest.mark.parametrize("n", [3, 5])
@pytest.mark.parametrize("tails, outliers", [("normal", 0.0), ("t3", 0.1)])
def test_one_sided_coverage_with_censored_no_bn_seeds(n, tails, outliers):
    """No-BN seeds past the budget (about 36% of them) are lower bounds at the budget; the interval's upper
    side is then open, and its lower side -- the claim "BN is at least this much faster" -- may miss the
    truth at most its nominal 2.5% (+ 3 sampling std)."""
    from statistics import NormalDist
    rng = np.random.default_rng(600 + n + int(100 * outliers))
    no_bn, bn = _steps(rng, (STUDIES, n), tails, outliers)
    budget = math.ceil(2000 * math.exp(0.35 * NormalDist().inv_cdf(0.6)) / GRID) * GRID
    cens = no_bn > budget
    assert 0.3 < cens.mean() < 0.42
    ivs = [ratio_interval(np.minimum(a, budget), b, c) for a, b, c in zip(no_bn, bn, cens)]
    low, _ = _misses([(iv.low, iv.high) for iv in ivs], _truth(tails, outliers))
    assert low <= 0.036, low
    assert all(iv.high is None for iv, c in zip(ivs, cens) if c.any())


@pytest.mark.slow  # as above
def test_the_coverage_check_fails_a_z_interval_at_three_seeds():
    """The harness can fail: the same grid-read steps judged by a normal (z) interval instead of Student's t
    cover the truth far less than 93% of the time at n = 3 (z = 1.96 against t = 4.30)."""
    rng = np.random.default_rng(700)
    no_bn, bn = _steps(rng, (STUDIES, 3), "normal", 0.0)
    x = np.log(no_bn / bn)
    m, se = x.mean(1), x.std(1, ddof=1) / math.sqrt(3)
    truth = _truth("normal", 0.0)
    z_bounds = list(zip(np.exp(m - 1.96 * se), np.exp(m + 1.96 * se)))
    low, high = _misses(z_bounds, truth)
    assert 1 - low - high < 0.90
    t_bounds_ = [(iv.low, iv.high) for iv in (ratio_interval(a, b) for a, b in zip(no_bn, bn))]
    low, high = _misses(t_bounds_, truth)
    assert 1 - low - high >= 0.93


def test_a_log_scale_bound_too_far_out_for_exp_is_inf_without_a_warning():
    """The p-value inversion asks for intervals at levels near 1, where exp(upper log bound) overflows: the bound is
    inf and no RuntimeWarning reaches the user's terminal (the MNIST report printed one)."""
    import warnings

    from bnexp.analysis.interval import seed_mean_interval

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        iv = seed_mean_interval([1e150, 1e-150, 1e150], [None] * 3, "log", level=0.999999)
    assert iv.high == float("inf") and 0.0 <= iv.low < 1.0
