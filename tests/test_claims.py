"""The claims machinery (bnexp/report/claims.py) against hand-computed statistics and the exact
bootstrap distribution of a 3-seed mean."""

import itertools
import json
import statistics

import numpy as np
import pytest

from bnexp.report.claims import (INCONCLUSIVE, NOT_SUPPORTED, PREMISE_NOT_MET, SUPPORTED, Claim, claims_frame,
                                 claims_md, evaluate, seed_interval)

RATIO = Claim("BN reduces shift", "no-BN / BN shift", ">", 1.0)


def exact_bootstrap_percentiles(x, q=(2.5, 97.5)):
    """Percentiles of the mean over every one of the n^n equally likely resamples (independent oracle)."""
    means = [np.mean(c) for c in itertools.product(x, repeat=len(x))]
    return np.percentile(means, q, method="inverted_cdf")


def test_seed_interval_mean_std_and_bootstrap_match_hand_and_exact_values():
    x = [1.0, 2.0, 4.0]
    out = seed_interval(x)
    assert out["n"] == 3
    assert out["mean"] == pytest.approx(7 / 3)
    assert out["std"] == pytest.approx(statistics.stdev(x))  # ddof=1
    lo, hi = exact_bootstrap_percentiles(x)
    # 9,999 resamples of a 27-point distribution: within one atom (1/3) of the exact percentiles
    assert abs(out["ci_low"] - lo) <= 1 / 3 + 1e-9 and abs(out["ci_high"] - hi) <= 1 / 3 + 1e-9
    assert min(x) <= out["ci_low"] <= out["mean"] <= out["ci_high"] <= max(x)


def test_seed_interval_degenerate_inputs():
    assert seed_interval([]) == {"n": 0, "mean": None, "std": None, "ci_low": None, "ci_high": None}
    one = seed_interval([0.5, None, float("nan")])
    assert one["n"] == 1 and one["mean"] == 0.5 and one["std"] is None and one["ci_low"] is None
    same = seed_interval([2.0, 2.0, 2.0])
    assert same["ci_low"] == same["ci_high"] == 2.0 and same["std"] == 0.0


@pytest.mark.parametrize("values, verdict", [
    ({0: 2.0, 1: 2.5, 2: 3.0}, SUPPORTED),          # every resample above 1
    ({0: 0.5, 1: 0.6, 2: 0.7}, NOT_SUPPORTED),      # every resample below 1
    ({0: 0.5, 1: 1.5, 2: 3.0}, INCONCLUSIVE),       # the interval straddles 1
    ({0: 2.0, 1: 3.0}, INCONCLUSIVE),               # 2 seeds < 3
])
def test_verdict_follows_the_interval_and_the_seed_count(values, verdict):
    row = evaluate(RATIO, values)
    assert row["verdict"] == verdict, row["reason"]
    assert row["per_seed"] == values and row["threshold"] == 1.0


def test_direction_below_mirrors_above():
    claim = Claim("BN lowers gradient ICS", "BN / no-BN", "<", 1.0)
    assert evaluate(claim, {0: 0.5, 1: 0.6, 2: 0.7})["verdict"] == SUPPORTED
    assert evaluate(claim, {0: 2.0, 1: 2.5, 2: 3.0})["verdict"] == NOT_SUPPORTED


def test_premise_and_chance_override_the_numbers():
    strong = {0: 5.0, 1: 6.0, 2: 7.0}
    assert evaluate(RATIO, strong, premise="no noise strength shifts more than no BN")["verdict"] == PREMISE_NOT_MET
    row = evaluate(RATIO, strong, never_learned=[2])
    assert row["verdict"] == INCONCLUSIVE and "2" in row["reason"]
    row = evaluate(RATIO, {}, missing="ks_first is not in the records of BN")
    assert row["verdict"] == INCONCLUSIVE and row["reason"] == "ks_first is not in the records of BN"
    assert evaluate(RATIO, {}, premise="p", missing="m")["verdict"] == PREMISE_NOT_MET


def test_bad_claims_are_refused_and_the_table_renders():
    with pytest.raises(ValueError, match="direction"):
        Claim("x", "q", ">=", 1.0)
    with pytest.raises(ValueError, match="threshold"):
        Claim("x", "q", ">", float("nan"))
    md = "\n".join(claims_md([evaluate(RATIO, {0: 2.0, 1: 2.5, 2: 3.0})]))
    assert "BN reduces shift" in md and "supported" in md and "0: 2" in md
    grad = claims_md([evaluate(Claim("g", "||G - G'|| / ||G||", "<", 1.0), {0: 0.5})])
    assert "\\|\\|G - G'\\|\\|" in grad[2] and grad[2].count(" | ") == 8  # "|" in a cell is escaped
    assert claims_md([]) == []


def test_table_from_report_json_rows_names_the_setting_and_sorts_seeds_as_numbers():
    rows = json.loads(json.dumps([evaluate(RATIO, {10: 2.0, 2: 2.5, 0: 3.0}) | {"setting": "lr=0.5"}]))
    frame = claims_frame(rows)  # report.json's per_seed keys are text
    assert frame["setting"].tolist() == ["lr=0.5"] and frame["per seed"][0] == "0: 3, 2: 2.5, 10: 2"
    assert "setting" not in claims_frame([evaluate(RATIO, {0: 1.0})])


def test_one_std_convention_in_every_statistic():
    """The sample std (ddof=1) in the seed statistics of the tables and in the claims; none from one seed."""
    from bnexp.report.rules import DDOF, stat
    from bnexp.report.stats import reach_stat, value_stat

    assert DDOF == 1
    assert stat([1.0, 2.0, 3.0]) == {"n": 3, "mean": 2.0, "std": 1.0}  # sqrt(((1-2)^2 + (3-2)^2) / 2)
    assert stat([5.0, None, float("nan")]) == {"n": 1, "mean": 5.0, "std": None}
    assert value_stat([1.0, 3.0])["std"] == seed_interval([1.0, 3.0])["std"] == pytest.approx(2 ** 0.5)
    assert reach_stat([1000, 1400, None])["text"] == "1,200 ± 283; not reached (1/3)"
