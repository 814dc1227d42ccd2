"""The claims machinery (bnexp/report/claims.py) against hand-computed statistics and scipy's Student-t
interval of a 3-seed mean."""

import json
import math
import statistics

import pytest
from scipy import stats as sps

from bnexp.analysis.interval import seed_interval
from bnexp.report.claims import INCONCLUSIVE, NOT_SUPPORTED, PREMISE_NOT_MET, SUPPORTED, Claim, evaluate
from bnexp.report.fmt import macro
from bnexp.analysis.rules import Censored

RATIO = Claim("BN reduces shift", "no-BN / BN shift", ">", 1.0)


def claims_cells(rows: list[dict]) -> list[dict]:
    """The claims table of report.md (templates/tables.md.j2) read back: one {header: cell text} per row."""
    head, _, *body = macro("claims", rows).splitlines()
    cells = lambda line: [c.strip() for c in line.strip()[1:-1].split(" | ")]  # noqa: E731
    return [dict(zip(cells(head), cells(line))) for line in body]


@pytest.mark.parametrize("value, bound, strict, expected", [
    (6.0, "exact", False, True), (4.0, "exact", False, False), (5.0, "exact", False, True), (5.0, "exact", True, False),
    (6.0, "lower", False, True), (4.0, "lower", False, None),   # true >= 4: may be below 5 or above
    (4.0, "upper", False, False), (6.0, "upper", False, None),  # true <= 6: may be above 5 or below
    (5.0, "upper", True, False), (5.0, "lower", True, None),    # true <= 5 is never > 5; true >= 5 may equal it
    (6.0, "unknown", False, None), (None, "exact", False, None)])
def test_a_bound_decides_a_threshold_only_on_its_own_side(value, bound, strict, expected):
    """Censored.above(5): what the true value's bound says about "above 5" (>= 5, or > 5 when strict)."""
    assert Censored(value, bound).above(5.0, strict=strict) is expected


def test_seed_interval_mean_std_and_t_interval_match_hand_and_scipy_values():
    x = [1.0, 2.0, 4.0]
    out = seed_interval(x)
    assert out["n"] == 3
    assert out["mean"] == pytest.approx(7 / 3)
    assert out["std"] == pytest.approx(statistics.stdev(x))  # ddof=1
    lo, hi = sps.t.interval(0.95, 2, loc=7 / 3, scale=statistics.stdev(x) / math.sqrt(3))
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((lo, hi))
    # by hand: 7/3 -+ 4.303 * 1.528 / sqrt(3) = [-1.461, 6.128], wider than the per-seed range
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((-1.4613, 6.1279), abs=1e-3)


def test_ratio_claims_use_the_log_scale_and_a_bound_opens_one_side():
    # log ratios log 2, log 2.5, log 3: geometric mean (2 * 2.5 * 3)^(1/3) = 2.466
    row = evaluate(RATIO, {0: 2.0, 1: 2.5, 2: 3.0}, scale="log", never_learned=[])
    logs = [math.log(v) for v in (2.0, 2.5, 3.0)]
    lo, hi = sps.t.interval(0.95, 2, loc=statistics.mean(logs), scale=statistics.stdev(logs) / math.sqrt(3))
    assert row["mean"] == pytest.approx(15 ** (1 / 3)) and row["verdict"] == SUPPORTED
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((math.exp(lo), math.exp(hi)))
    assert row["interval"]["method"] == "student-t, log ratio"
    # seed 2 never reached the target with no BN: its ratio is only a lower bound, so the upper side is open;
    # the lower side still decides "supported"
    bound = {0: Censored(2.0), 1: Censored(2.5), 2: Censored(3.0, "lower", "budget", 300)}
    row = evaluate(RATIO, bound, scale="log", never_learned=[])
    assert row["ci_high"] is None and row["ci_low"] == pytest.approx(math.exp(lo))
    assert row["verdict"] == SUPPORTED and row["bounds"] == {2: "lower"} and "upper side is open" in row["reason"]
    cells = claims_cells([row])[0]  # the estimate is then a lower bound too, and the open side is written so
    assert cells["mean"] == f">= {15 ** (1 / 3):.3g}" and cells["95% interval"] == f"[{math.exp(lo):.3g}, open]"
    # an upper-bound seed opens the lower side: a ">" claim cannot be supported, nor refuted by the open side
    up = {0: Censored(2.0), 1: Censored(2.5), 2: Censored(3.0, "upper")}
    assert evaluate(RATIO, up, scale="log", never_learned=[])["verdict"] == INCONCLUSIVE
    # a seed bounded from both sides leaves no interval
    unknown = {0: Censored(2.0), 1: Censored(2.5), 2: Censored(3.0, "unknown")}
    row = evaluate(RATIO, unknown, scale="log", never_learned=[])
    assert row["ci_low"] is None and row["ci_high"] is None and row["verdict"] == INCONCLUSIVE
    assert row["std"] == pytest.approx(statistics.stdev([2.0, 2.5]))  # the unknown seed says nothing of the spread


def test_seeds_where_neither_run_reached_the_target_show_no_mean_and_no_std():
    """Both runs of every seed stopped at the same budget short of the target: each ratio is budget / budget = 1
    bounded on both sides ("~1"), which says nothing; the row shows no mean and no std (not a std of 0 that reads
    as "equally fast in every seed")."""
    row = evaluate(RATIO, {s: Censored(1.0, "unknown") for s in range(3)}, scale="log", never_learned=[])
    assert row["mean"] is None and row["std"] is None and row["verdict"] == INCONCLUSIVE
    cells = claims_cells([row])[0]
    assert cells["per seed"] == "0: ~1, 1: ~1, 2: ~1" and cells["mean"] == "-" and cells["std (ddof=1)"] == "-"


def test_seed_interval_degenerate_inputs():
    assert seed_interval([]) == {"n": 0, "mean": None, "std": None, "ci_low": None, "ci_high": None}
    one = seed_interval([0.5, None, float("nan")])
    assert one["n"] == 1 and one["mean"] == 0.5 and one["std"] is None and one["ci_low"] is None
    same = seed_interval([2.0, 2.0, 2.0])
    assert same["ci_low"] == same["ci_high"] == 2.0 and same["std"] == 0.0


@pytest.mark.parametrize("values, verdict", [
    ({0: 2.0, 1: 2.5, 2: 3.0}, SUPPORTED),          # 2.5 -+ 4.303 * 0.5 / sqrt(3) = [1.26, 3.74]
    ({0: 0.5, 1: 0.6, 2: 0.7}, NOT_SUPPORTED),      # 0.6 -+ 0.248 = [0.35, 0.85]
    ({0: 0.5, 1: 1.5, 2: 3.0}, INCONCLUSIVE),       # the interval straddles 1
    ({0: 2.0, 1: 3.0}, INCONCLUSIVE),               # 2 seeds < 3
])
def test_verdict_follows_the_interval_and_the_seed_count(values, verdict):
    row = evaluate(RATIO, values, never_learned=[])
    assert row["verdict"] == verdict, row["reason"]
    assert row["per_seed"] == values and row["threshold"] == 1.0


def test_direction_below_mirrors_above():
    claim = Claim("BN lowers gradient ICS", "BN / no-BN", "<", 1.0)
    assert evaluate(claim, {0: 0.5, 1: 0.6, 2: 0.7}, never_learned=[])["verdict"] == SUPPORTED
    assert evaluate(claim, {0: 2.0, 1: 2.5, 2: 3.0}, never_learned=[])["verdict"] == NOT_SUPPORTED


def test_premise_and_chance_override_the_numbers():
    strong = {0: 5.0, 1: 6.0, 2: 7.0}
    assert evaluate(RATIO, strong, premise="no noise strength shifts more than no BN", never_learned=[])["verdict"] == PREMISE_NOT_MET
    row = evaluate(RATIO, strong, never_learned=[2])
    assert row["verdict"] == INCONCLUSIVE and "2" in row["reason"]
    row = evaluate(RATIO, {}, missing="ks_first is not in the records of BN", never_learned=[])
    assert row["verdict"] == INCONCLUSIVE and row["reason"] == "ks_first is not in the records of BN"
    assert evaluate(RATIO, {}, premise="p", missing="m", never_learned=[])["verdict"] == PREMISE_NOT_MET


def test_bad_claims_are_refused_and_the_table_renders():
    with pytest.raises(ValueError, match="direction"):
        Claim("x", "q", ">=", 1.0)
    with pytest.raises(ValueError, match="threshold"):
        Claim("x", "q", ">", float("nan"))
    md = macro("claims", [evaluate(RATIO, {0: 2.0, 1: 2.5, 2: 3.0}, never_learned=[])])
    assert "BN reduces shift" in md and "supported" in md and "0: 2" in md
    grad = macro("claims", [evaluate(Claim("g", "||G - G'|| / ||G||", "<", 1.0), {0: 0.5}, never_learned=[])]).splitlines()
    assert "\\|\\|G - G'\\|\\|" in grad[2] and grad[2].count(" | ") == 8  # "|" in a cell is escaped
    assert macro("claims", []) == ""


def test_table_from_report_json_rows_names_the_setting_and_sorts_seeds_as_numbers():
    rows = json.loads(json.dumps([evaluate(RATIO, {10: 2.0, 2: 2.5, 0: 3.0}, never_learned=[]) | {"setting": "lr=0.5"}]))
    cells = claims_cells(rows)  # report.json's per_seed keys are text
    assert [c["setting"] for c in cells] == ["lr=0.5"] and cells[0]["per seed"] == "0: 3, 2: 2.5, 10: 2"
    assert "setting" not in claims_cells([evaluate(RATIO, {0: 1.0}, never_learned=[])])[0]


def test_one_std_convention_in_every_statistic():
    """The sample std (ddof=1) in the seed statistics of the tables and in the claims; none from one seed."""
    from bnexp.analysis.rules import DDOF, stat
    from bnexp.report.stats import reach_stat, value_stat

    assert DDOF == 1
    assert stat([1.0, 2.0, 3.0]) == {"n": 3, "mean": 2.0, "std": 1.0}  # sqrt(((1-2)^2 + (3-2)^2) / 2)
    assert stat([5.0, None, float("nan")]) == {"n": 1, "mean": 5.0, "std": None}
    assert value_stat([1.0, 3.0])["std"] == seed_interval([1.0, 3.0])["std"] == pytest.approx(2 ** 0.5)
    assert reach_stat([1000, 1400, None])["text"] == "1,200 ± 283; not reached (1/3)"
