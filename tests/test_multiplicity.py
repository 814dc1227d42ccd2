"""Multiplicity and power of a page's claims (bnexp.report.multiplicity; docs/studies/PLAN.md, amendment items 2-4):
the p-value inverted from the claim's own interval equals scipy's one-sample t test where nothing is censored, an
open side never decides, Holm's step-down adjustment on a hand-computed family, the Holm-adjusted verdict, the
80%-power detectable effect against a simulated power, and the edge / budget-bound marks."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bnexp.report.claims import Claim, evaluate
from bnexp.report.multiplicity import (adjust_page, budget_bound, claim_p_value, detectable, evaluation_bound, holm,
                                       interval_p_value, mark_claims)
from bnexp.analysis.rules import Censored


@pytest.mark.parametrize("values, scale, threshold", [
    ([1.8, 2.2, 2.5, 1.9, 2.1], "log", 1.0),
    ([0.9, 1.3, 1.1], "log", 1.0),
    ([0.4, -0.2, 0.9, 0.3, 0.1], "raw", 0.0),
    ([96.1, 95.8, 96.4], "raw", 95.0),
])
def test_the_inverted_interval_is_the_one_sample_t_test(values, scale, threshold):
    x = np.log(values) if scale == "log" else np.asarray(values)
    t0 = np.log(threshold) if scale == "log" else threshold
    expected = stats.ttest_1samp(x, t0).pvalue
    assert interval_p_value(values, None, scale, threshold) == pytest.approx(expected, abs=1e-5)


def test_an_open_side_never_decides():
    """Lower bounds open the upper side: the interval can lie above 1 (p from its closed lower end) but never
    below it."""
    up = [2.0, 2.4, 3.0, 2.2, 2.6]
    marks = ["", ">=", "", "", ""]
    p = interval_p_value(up, marks, "log", 1.0)
    assert 0 < p < 0.01
    assert interval_p_value([0.5, 0.4, 0.6, 0.45, 0.55], marks, "log", 1.0) == 1.0  # below 1, upper side open


def test_the_p_value_agrees_with_the_claims_own_95_percent_verdict():
    claim = Claim("x", "ratio", ">", 1.0)
    rng = np.random.default_rng(3)
    for _ in range(40):
        per_seed = dict(enumerate(np.exp(rng.normal(0.15, 0.2, 5)), start=0))
        row = evaluate(claim, per_seed, [], scale="log")
        p = claim_p_value(row)
        assert (p <= 0.05) == (row["verdict"] != "inconclusive"), (p, row["verdict"])


def test_holm_step_down_by_hand():
    # sorted 0.01, 0.02, 0.03, 0.2 with m = 4: 0.04, max(0.04, 0.06), max(0.06, 0.06), max(0.06, 0.2)
    assert holm([0.03, 0.2, 0.01, None, 0.02]) == pytest.approx([0.06, 0.2, 0.04, None, 0.06])
    assert holm([]) == []
    assert holm([0.6, 0.5]) == pytest.approx([1.0, 1.0])


def test_the_holm_verdict_of_a_page():
    """Four claims: one clearly supported (stays), two supported at 95% alone with p = 0.028 each (after Holm with
    m = 3: 2 x 0.028 = 0.055 for both, inconclusive), one premise not met (stays, not counted)."""
    c = Claim("c", "ratio", ">", 1.0)
    strong = evaluate(c, {0: 3.0, 1: 3.2, 2: 2.9, 3: 3.1, 4: 3.05}, [], scale="log")
    weak = [evaluate(c, {0: 1.08, 1: 1.25, 2: 1.12, 3: 1.02, 4: 1.2}, [], scale="log") for _ in range(2)]  # t test p 0.028
    gone = evaluate(c, {0: 1.0}, [], premise="no BN run", scale="log")
    assert strong["verdict"] == weak[0]["verdict"] == "supported"
    meta = adjust_page([strong, *weak, gone])
    assert meta["claims_tested"] == 3 and meta["claims"] == 4
    assert strong["holm_verdict"] == "supported" and gone["holm_verdict"] == "premise not met"
    for w in weak:
        assert w["p_value"] == pytest.approx(0.027585, abs=1e-5) and w["holm_p"] == pytest.approx(2 * w["p_value"])
        assert w["holm_verdict"] == "inconclusive"
    # two claims: the weaker one is multiplied by 1 and keeps its verdict
    adjust_page([strong, weak[0]])
    assert weak[0]["holm_p"] == pytest.approx(weak[0]["p_value"]) and weak[0]["holm_verdict"] == "supported"


def test_the_detectable_effect_has_80_percent_power():
    """exp((t_.975,4 + t_.8,4) s / sqrt(5)) on log ratios: simulated one-sample t tests at that true effect
    reject about 80% of the time (the formula is the usual approximation: within 0.75-0.85)."""
    row = evaluate(Claim("c", "r", ">", 1.0), {0: 1.1, 1: 0.8, 2: 1.3, 3: 1.0, 4: 0.9}, [], scale="log")
    s = np.log([1.1, 0.8, 1.3, 1.0, 0.9]).std(ddof=1)
    d = detectable(row)
    assert d == pytest.approx(np.exp((stats.t.ppf(0.975, 4) + stats.t.ppf(0.8, 4)) * s / np.sqrt(5)))
    rng = np.random.default_rng(0)
    x = rng.normal(np.log(d), s, (20000, 5))
    power = (stats.ttest_1samp(x, 0.0, axis=1).pvalue < 0.05).mean()
    assert 0.75 < power < 0.85
    raw = evaluate(Claim("c", "points", ">", 0.0), {0: 0.4, 1: -0.2, 2: 0.9}, [], scale="raw")
    assert detectable(raw) == pytest.approx((stats.t.ppf(0.975, 2) + stats.t.ppf(0.8, 2))
                                            * np.std([0.4, -0.2, 0.9], ddof=1) / np.sqrt(3))


def test_marks_edge_and_budget_bound():
    c = Claim("c", "ratio", ">", 1.0)
    bound = {s: Censored(30_000, "lower") / Censored(1000.0 + 100 * s) for s in range(5)}
    row = evaluate(c, bound, [], scale="log")
    assert budget_bound(row) and row["verdict"] == "supported"
    edge = {"rate": 2.4, "grid": [{"rate": r} for r in (0.15, 0.3, 0.6, 1.2, 2.4)]}
    inside = {"rate": 0.6, "grid": edge["grid"]}
    record = [{"chosen": 2.4, "rates": [0.15, 0.3, 0.6, 1.2, 2.4], "status": "limit", "added": 3,
               "mark": "edge (3 rates added beyond it)"}]  # grid_edges.json's entry: the rule stopped at its limit
    row["choices"] = [edge, inside]
    plain = evaluate(c, {s: 2.0 + 0.1 * s for s in range(5)}, [], scale="log")
    plain["bn_choice"] = inside
    mark_claims([row, plain], record)
    assert row["marks"] == ["edge (3 rates added beyond it)", "budget-bound"]
    assert row["marked_verdict"] == "supported, edge-bound, budget-bound"
    assert plain["marks"] == [] and plain["marked_verdict"] == "supported"


def test_a_ratio_set_by_the_first_evaluation_is_marked_evaluation_bound_not_budget_bound():
    """BN at the target by its first evaluation (step 100) in every seed, no BN exact: each no-BN / BN ratio is only
    a lower bound, set by the evaluation interval; the verdict says so ("evaluation-bound"), not "budget-bound"."""
    c = Claim("c", "ratio", ">", 1.0)
    per_seed = {s: Censored.steps(2000 + 100 * s, 4000) / Censored.steps(100, 4000, first_eval=100) for s in range(5)}
    row = evaluate(c, per_seed, [], scale="log")
    assert row["causes"] == {s: "first_evaluation" for s in range(5)} and row["verdict"] == "supported"
    assert evaluation_bound(row) and not budget_bound(row)
    mark_claims([row], [])
    assert row["marks"] == ["evaluation-bound"] and row["marked_verdict"] == "supported, evaluation-bound"
    legacy = {k: v for k, v in row.items() if k != "causes"}  # report.json from before causes: budget, as then
    assert budget_bound(legacy) and not evaluation_bound(legacy)
