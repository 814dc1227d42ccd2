"""The Sec. 4.2 budget-accuracy frontier (docs/cifar/PLAN.md) on SYNTHETIC frontiers, no training.

The measure must not manufacture its result (docs/cifar/PLAN.md): two presets with the same
accuracy-vs-budget function give S = 1 whatever their ladders are, and a preset whose function is the
baseline's at 1/k of the budget gives S = k, within interpolation error, for several k and ladders.
Expectations are closed-form functions of u = log2(budget): for a function linear in u the log2
interpolation is exact, so S must equal 1 (or k) to float precision; for a curved one the error is
bounded by the interpolation error of the function itself (derived below, independently of the code).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from bnexp.analysis.frontier import COLUMNS, GAIN, analyze, budget_to_reach, frontier_section, load_runs, speedup_at
from bnexp.report.frontier_text import frontier_markdown, frontier_words
from bnexp.designs import ladder as L


def f_lin(b):
    """Accuracy linear in log2(budget): +5 points per doubling (0.378 at 3,000 steps, 0.578 at 48,000)."""
    return 0.05 * np.log2(b) - 0.2


def f_sat(b):
    """A saturating (concave) frontier: 0.8 - 0.7 exp(-(u - 7) / 3), u = log2(budget)."""
    return 0.8 - 0.7 * np.exp(-(np.log2(b) - 7) / 3)


def sat_error_log2(ladder) -> float:
    """Upper bound on |log2 B_interp(a) - log2 B_true(a)| for f_sat on ``ladder``: on an interval of width
    h (in u) the chord is off f by at most max|f''| h^2 / 8, and the budget error in u is that over
    min f'. For f_sat, f'' / f' = -1/3 and both shrink as exp(-u/3), so the ratio of the left end's
    |f''| to the right end's f' is e^(h/3) / 3: error <= h^2 e^(h/3) / 24."""
    h = np.diff(np.log2(np.asarray(ladder, float)))
    return float(np.max(h ** 2 * np.exp(h / 3) / 24))


def table(spec: dict, seeds=(0,)) -> pd.DataFrame:
    """A runs table: spec = {preset: (ladder, accuracy function of the budget [, per-seed offsets])}."""
    rows = []
    for preset, (ladder, fn, *off) in spec.items():
        for s in seeds:
            c = off[0][s] if off else 0.0
            rows += [{"preset": preset, "budget_steps": int(b), "seed": s, "final_test_accuracy": float(fn(b)) + c,
                      "final_train_accuracy": min(1.0, float(fn(b)) + c + 0.05)} for b in ladder]
    return pd.DataFrame(rows, columns=COLUMNS)


def doubling(first, n):
    return [first * 2 ** i for i in range(n)]


BASE = doubling(3000, 5)  # 3k .. 48k, the CPU baseline ladder
LADDERS = [doubling(375, 8), doubling(1500, 6), doubling(1000, 7), [700, 2100, 5000, 9000, 30000, 64000],
           doubling(4500, 4)]


# ----------------------------------------------------------------------------- B(a)


def test_budget_to_reach_interpolates_in_log2_and_never_extrapolates():
    b, y = [1000, 4000], [0.2, 0.6]
    # halfway in accuracy = halfway in log2(budget): 2^(log2(1000) + 1) = 2000 (not the linear 2500)
    assert budget_to_reach(b, y, 0.4) == (pytest.approx(2000.0), False)
    assert budget_to_reach(b, y, 0.6) == (pytest.approx(4000.0), False)
    assert budget_to_reach(b, y, 0.61) == (None, False)           # never reached: undefined
    assert budget_to_reach(b, y, 0.1) == (1000.0, True)           # reached at the smallest budget: censored
    # first crossing of a non-monotone frontier
    assert budget_to_reach([1, 2, 4, 8], [0.1, 0.5, 0.3, 0.7], 0.4)[0] == pytest.approx(2 ** 0.75)


# ----------------------------------------------------------------------------- S = 1 for the same function


@pytest.mark.parametrize("ladder", LADDERS)
def test_same_linear_function_gives_s_equal_1_on_any_ladder(ladder):
    sec = analyze(table({"baseline": (BASE, f_lin), "bn_x5": (ladder, f_lin)}))
    curve = sec["frontier_analysis"]["speedup"]["bn_x5"]["curve"]
    exact = [p["speedup"] for p in curve if p["bound"] == "exact"]
    assert len(exact) >= 10
    assert np.allclose(exact, 1.0, rtol=1e-9)
    m = sec["matched_accuracy"]["bn_x5"]
    if max(ladder) >= max(BASE):  # a* = f(48000) lies on the preset's frontier too
        assert m["speedup"] == pytest.approx(1.0, rel=1e-9) and not m["speedup_is_lower_bound"]
    else:
        assert m["speedup"] is None and m["pass"] is None  # not reached yet and still gaining: unfinished


@pytest.mark.parametrize("ladder", LADDERS)
def test_same_saturating_function_gives_s_1_within_interpolation_error(ladder):
    sec = analyze(table({"baseline": (BASE, f_sat), "bn_x5": (ladder, f_sat)}))
    exact = [p["speedup"] for p in sec["frontier_analysis"]["speedup"]["bn_x5"]["curve"] if p["bound"] == "exact"]
    tol = sat_error_log2(BASE) + sat_error_log2(ladder)
    assert exact and max(abs(math.log2(s)) for s in exact) <= tol + 1e-12
    assert tol < 0.3  # the bound itself is tight enough to mean something (S within 2^0.3 = 23%)


# ----------------------------------------------------------------------------- S = k for the function at 1/k of the budget


@pytest.mark.parametrize("k", [2.0, 5.0, 8.0, 14.7])
@pytest.mark.parametrize("ladder", LADDERS[:4])
def test_function_at_one_kth_of_the_budget_gives_s_equal_k(k, ladder):
    shifted = lambda b: f_lin(k * np.asarray(b, float))  # noqa: E731  the preset at B has what the baseline has at kB
    sec = analyze(table({"baseline": (BASE, f_lin), "bn_x5": (ladder, shifted)}))
    exact = [p["speedup"] for p in sec["frontier_analysis"]["speedup"]["bn_x5"]["curve"] if p["bound"] == "exact"]
    assert len(exact) >= 5 and np.allclose(exact, k, rtol=1e-9)
    m = sec["matched_accuracy"]["bn_x5"]
    if shifted(max(ladder)) >= f_lin(max(BASE)):  # the preset's ladder reaches a*
        assert m["speedup"] == pytest.approx(k, rel=1e-9) and not m["speedup_is_lower_bound"]
        assert m["pass"] is (k >= 5)
    sat = analyze(table({"baseline": (BASE, f_sat), "bn_x5": (ladder, lambda b: f_sat(k * np.asarray(b, float)))}))
    exact = [p["speedup"] for p in sat["frontier_analysis"]["speedup"]["bn_x5"]["curve"] if p["bound"] == "exact"]
    tol = sat_error_log2(BASE) + sat_error_log2(ladder)
    assert exact and max(abs(math.log2(s / k)) for s in exact) <= tol + 1e-12


def test_headline_on_the_ladder_points_is_exact_for_any_function():
    # a* = f_sat(48000) is reached by the preset exactly at 6000 when its function is the baseline's at 1/8
    sec = analyze(table({"baseline": (BASE, f_sat), "bn_x5": (doubling(375, 5), lambda b: f_sat(8 * np.asarray(b)))}))
    m = sec["matched_accuracy"]["bn_x5"]
    assert m["target_accuracy"] == pytest.approx(f_sat(48000))
    assert m["speedup"] == pytest.approx(8.0) and m["pass"] is True


# ----------------------------------------------------------------------------- bounds, undefined, seeds, convergence


def test_lower_bound_when_a_star_is_reached_at_the_preset_smallest_budget():
    # the preset at 375 steps already beats the baseline's best, a* = f_lin(48000) = 0.578, which the baseline
    # first reaches at its largest rung: B_baseline(a*) = 48000, B_preset(a*) <= 375, so S >= 128
    sec = analyze(table({"baseline": (BASE, f_lin), "bn_x5": (doubling(375, 3), lambda b: 0.7 + 0 * np.log2(b)),
                         "bn_baseline": (doubling(1500, 3), lambda b: f_lin(b) + 0.5)}))
    m = sec["matched_accuracy"]["bn_x5"]
    assert m["speedup"] == pytest.approx(48000 / 375) and m["speedup_is_lower_bound"] is True and m["pass"] is True
    assert sec["matched_accuracy"]["bn_baseline"]["speedup"] == pytest.approx(48000 / 1500)
    md = "\n".join(frontier_markdown(sec))
    assert ">= 128.00x" in md and "<= 375" in md
    # a lower bound below the pass factor decides nothing: S >= 48000 / 12000 = 4 may still be >= 5
    und = analyze(table({"baseline": (BASE, f_lin), "bn_x5": ([12000, 24000], lambda b: 0.7 + 0 * np.log2(b))}))
    assert und["matched_accuracy"]["bn_x5"]["pass"] is None
    assert und["frontier_analysis"]["pass_rule"]["verdict"] == "UNDECIDED"


def test_undefined_where_never_reached_and_curve_only_where_both_reach():
    low = lambda b: f_lin(b) - 0.1  # noqa: E731  always 10 points below the baseline at the same budget
    sec = analyze(table({"baseline": (BASE, f_lin), "bn_x5": (doubling(3000, 5), low)}))
    m = sec["matched_accuracy"]["bn_x5"]
    assert m["speedup"] is None and m["speedup_is_lower_bound"] is False and m["pass"] is False
    assert m["speedup_per_seed"] == {"0": None}
    assert sec["frontier_analysis"]["pass_rule"]["verdict"] == "FAIL"
    curve = sec["frontier_analysis"]["speedup"]["bn_x5"]["curve"]
    assert max(p["accuracy"] for p in curve) == pytest.approx(low(48000))  # the highest a both reach
    # the same function 2 doublings slower: S = 1/4 wherever both frontiers are uncensored
    assert np.allclose([p["speedup"] for p in curve if p["bound"] == "exact"], 0.25)
    assert speedup_at((np.array([1.0, 2.0]), np.array([0.1, 0.2])), (np.array([1.0, 2.0]), np.array([0.1, 0.15])),
                      0.18)["speedup"] is None
    assert "not reached" in "\n".join(frontier_markdown(sec))


def test_per_seed_speedups_pair_seed_s_with_seed_s_and_give_the_range():
    # baseline seed s: f_lin + c_s; preset seed s: the baseline's seed at 1/k_s of the budget
    k = {0: 6.0, 1: 9.0}
    rows = []
    for s, c in ((0, 0.0), (1, 0.02)):
        rows.append(table({"baseline": (BASE, lambda b, c=c: f_lin(b) + c)}, seeds=(s,)))
        rows.append(table({"bn_x5": (doubling(375, 6), lambda b, c=c, s=s: f_lin(k[s] * np.asarray(b)) + c)},
                          seeds=(s,)))
    sec = analyze(pd.concat(rows, ignore_index=True))
    m = sec["matched_accuracy"]["bn_x5"]
    assert m["speedup_per_seed"] == {"0": pytest.approx(6.0), "1": pytest.approx(9.0)}
    assert sec["frontier_analysis"]["speedup"]["bn_x5"]["range"] == [pytest.approx(6.0), pytest.approx(9.0)]
    # the seed-mean frontiers: baseline f_lin + 0.01; preset at 375 * 2^i: the mean of the two seeds' values
    assert m["target_accuracy"] == pytest.approx(f_lin(48000) + 0.01)
    assert "range 6.00-9.00x" in "\n".join(frontier_markdown(sec))


@pytest.mark.parametrize("gain, converged", [(0.004, True), (0.006, False)])
def test_baseline_converged_iff_the_last_doubling_gains_less_than_half_a_point(gain, converged):
    accs = {3000: 0.50, 6000: 0.55, 12000: 0.58, 24000: 0.58 + gain}
    runs = table({"baseline": (list(accs), lambda b: accs[int(b)]),
                  "bn_x5": (doubling(375, 4), lambda b: 0.5 + 0.03 * np.log2(np.asarray(b) / 375))})
    sec = analyze(runs)
    fa = sec["frontier_analysis"]
    assert fa["baseline_last_gain"] == pytest.approx(gain)
    assert fa["baseline_converged"] is converged and sec["matched_accuracy"]["bn_x5"]["baseline_converged"] is converged
    md = "\n".join(frontier_markdown(sec))
    assert ("**converged**" in md) is converged
    assert ("measured at its best accuracy so far" in md) is (not converged)
    assert GAIN == 0.005
    one = analyze(table({"baseline": ([6000], lambda b: 0.5 + 0 * np.log2(b)), "bn_x5": ([375, 750], f_lin)}))
    assert one["frontier_analysis"]["baseline_converged"] is None


def test_frontier_section_schema_in_report_json():
    sec = analyze(table({"baseline": (BASE, f_lin), "bn_x5": (doubling(375, 8), lambda b: f_lin(8 * np.asarray(b))),
                         "bn_baseline": (doubling(1500, 6), lambda b: f_lin(2 * np.asarray(b)))}, seeds=(0, 1)))
    data = json.loads(json.dumps(sec))  # JSON-serializable as it is
    assert set(data) == {"frontier", "matched_accuracy", "frontier_analysis"}
    assert all(set(r) == {"preset", "budget_steps", "seed", "final_test_accuracy", "final_train_accuracy"}
               for r in data["frontier"])
    assert len(data["frontier"]) == 2 * (5 + 8 + 6)
    assert all(0.0 <= r["final_test_accuracy"] <= 1.0 and isinstance(r["budget_steps"], int) for r in data["frontier"])
    assert set(data["matched_accuracy"]) == {"bn_x5", "bn_baseline"}
    for m in data["matched_accuracy"].values():
        assert set(m) == {"target_accuracy", "baseline_converged", "speedup", "speedup_is_lower_bound",
                          "speedup_per_seed", "pass"}
        assert set(m["speedup_per_seed"]) == {"0", "1"}
    assert data["matched_accuracy"]["bn_x5"]["speedup"] == pytest.approx(8.0)
    assert data["matched_accuracy"]["bn_baseline"]["pass"] is True  # 2x > 1
    with pytest.raises(ValueError, match="baseline"):
        analyze(table({"bn_x5": (BASE, f_lin)}))


def test_other_claims_use_the_same_machinery():
    chance = lambda b: 0.1 + 0 * np.log2(b)  # noqa: E731
    sec = analyze(table({"baseline": (BASE, f_lin), "bn_x5": (doubling(375, 5), lambda b: f_lin(8 * np.asarray(b))),
                         "bn_x30": (doubling(375, 5), lambda b: f_lin(8 * np.asarray(b)) + 0.01),
                         "bn_x5_sigmoid": (doubling(375, 3), lambda b: f_lin(4 * np.asarray(b))),
                         "baseline_sigmoid": (BASE[:3], chance)}))
    ma = sec["matched_accuracy"]
    assert ma["bn_x30"]["pass"] is True  # 1 point above bn_x5 at their largest common budget (6000)
    assert sec["frontier_analysis"]["speedup"]["bn_x30"]["x5_vs_x30"]["budget_steps"] == 6000
    assert ma["bn_x5_sigmoid"]["pass"] is True and ma["baseline_sigmoid"]["pass"] is True
    assert ma["baseline_sigmoid"]["speedup"] is None


def test_does_not_train_is_decided_only_through_the_early_budget():
    """PLAN.md: "does not train" is chance through 12k steps. A sigmoid ladder stopped at 6k (at chance so far)
    decides nothing, for baseline_sigmoid nor for bn_x5_sigmoid's "trains where baseline_sigmoid does not";
    at 12k it does; one rung above chance + 5 points refutes it at any budget."""
    chance = lambda b: 0.1 + 0 * np.log2(b)  # noqa: E731
    spec = {"baseline": (BASE, f_lin), "bn_x5_sigmoid": (doubling(375, 3), lambda b: f_lin(4 * np.asarray(b)))}
    for ladder, expected in ((BASE[:2], None), (BASE[:3], True)):
        for control in ("baseline_sigmoid", "baseline_x5"):
            ma = analyze(table({**spec, control: (ladder, chance)}))["matched_accuracy"]
            assert ma[control]["pass"] is expected
        ma = analyze(table({**spec, "baseline_sigmoid": (ladder, chance)}))["matched_accuracy"]
        assert ma["bn_x5_sigmoid"]["pass"] is expected
    ma = analyze(table({**spec, "baseline_sigmoid": (BASE[:1], lambda b: 0.2 + 0 * np.log2(b))}))["matched_accuracy"]
    assert ma["baseline_sigmoid"]["pass"] is False and ma["bn_x5_sigmoid"]["pass"] is False


def test_a_ladder_still_climbing_below_a_star_is_undecided_not_a_fail():
    """Read mid-sweep: bn_x5 has run 375..12,000 steps, +5 points per doubling, and not reached a* (the
    baseline's best, at 48,000): its ladder would run the next rung, so the pass rule is UNDECIDED, not FAIL.
    Stopped by a rule it fails: converged below a* (last doubling +0.2 points), or at the baseline's largest
    budget still gaining (the cap)."""
    climbing = analyze(table({"baseline": (BASE, f_lin), "bn_x5": (doubling(375, 6), f_lin)}))
    assert climbing["matched_accuracy"]["bn_x5"]["speedup"] is None
    assert climbing["matched_accuracy"]["bn_x5"]["pass"] is None
    assert climbing["frontier_analysis"]["pass_rule"]["verdict"] == "UNDECIDED"
    assert climbing["frontier_analysis"]["climbing"] == ["bn_x5"]
    assert "its ladder is unfinished" in "\n".join(frontier_markdown(climbing))
    flat = lambda b: 0.5 + 0.002 * np.log2(b / 375)  # noqa: E731  +0.2 points per doubling: converged
    for spec in ((doubling(375, 6), flat), (doubling(3000, 5), lambda b: f_lin(b) - 0.1)):
        sec = analyze(table({"baseline": (BASE, f_lin), "bn_x5": spec}))
        assert sec["matched_accuracy"]["bn_x5"]["pass"] is False and sec["frontier_analysis"]["climbing"] == []
        assert sec["frontier_analysis"]["pass_rule"]["verdict"] == "FAIL"


def test_bn_x30_below_a_star_and_still_climbing_is_undecided_not_a_fail():
    """Read mid-sweep: bn_x30 has run 375..1,500 steps below bn_x5 and a*, still gaining 5 points per doubling,
    so its ladder would run on and "above bn_x5 at their largest common budget" is not decided yet; once its
    ladder has stopped (converged, +0.2 points per doubling) the same comparison is a verdict."""
    x5 = (doubling(375, 8), lambda b: f_lin(8 * np.asarray(b)))
    climbing = analyze(table({"baseline": (BASE, f_lin), "bn_x5": x5,
                              "bn_x30": (doubling(375, 3), lambda b: f_lin(4 * np.asarray(b)))}))
    assert climbing["matched_accuracy"]["bn_x30"]["pass"] is None
    assert climbing["frontier_analysis"]["speedup"]["bn_x30"]["x5_vs_x30"]["budget_steps"] == 1500
    flat = lambda b: 0.5 + 0.002 * np.log2(np.asarray(b) / 375)  # noqa: E731
    stopped = analyze(table({"baseline": (BASE, f_lin), "bn_x5": x5, "bn_x30": (doubling(375, 3), flat)}))
    assert stopped["matched_accuracy"]["bn_x30"]["pass"] is True  # 50.4% vs bn_x5's 47.8% at 1,500 steps


def test_an_upper_bound_passes_no_rule_and_a_lower_bound_fails_none():
    """The baseline's best at its smallest budget makes B_baseline(a*) at most 1,000, so S(a*) <= 5.52 decides
    nothing about S >= 5 (it may be far below); a lower bound S >= 0.5 decides nothing about S > 1."""
    base = (np.array([1000, 2000]), np.array([0.80, 0.79]))
    x5 = (np.array([100, 200]), np.array([0.50, 0.85]))
    rows = [{"preset": p, "budget_steps": int(b), "seed": 0, "final_test_accuracy": float(a),
             "final_train_accuracy": float(a)} for p, (bs, accs) in (("baseline", base), ("bn_x5", x5))
            for b, a in zip(bs, accs)]
    sec = analyze(pd.DataFrame(rows))
    m = sec["matched_accuracy"]["bn_x5"]
    assert m["speedup"] == pytest.approx(5.52, abs=0.01) and m["pass"] is None
    from bnexp.report.frontier_plan_v2 import paper_claims
    (seed,) = next(r for r in paper_claims(sec) if r["preset"] == "bn_x5")["per_seed"]
    assert seed["value"] == "<= 5.52x" and seed["pass"] is None
    rows = [{"preset": p, "budget_steps": b, "seed": 0, "final_test_accuracy": a, "final_train_accuracy": a}
            for p, pts in (("baseline", ((1000, 0.5), (2000, 0.8))), ("bn_baseline", ((4000, 0.85), (8000, 0.86))))
            for b, a in pts]
    m = analyze(pd.DataFrame(rows))["matched_accuracy"]["bn_baseline"]
    assert m["speedup"] == pytest.approx(0.5) and m["speedup_is_lower_bound"] and m["pass"] is None


# ----------------------------------------------------------------------------- loading a sweep folder


def _run_dir(root, preset, budget, seed, test, train, status="finished", lr=0.025, dropout=0.3):
    d = root / f"{preset},lr={lr},dropout={dropout},steps={budget},seed={seed}"
    d.mkdir(parents=True)
    s = {"status": status, "experiment": preset, "max_steps": budget, "step": budget, "seed": seed, "lr": lr,
         "final_test_accuracy": test}
    (d / "summary.json").write_text(json.dumps(s))
    (d / "metrics.jsonl").write_text(json.dumps({"step": budget // 2, "test_accuracy": test, "train_accuracy": 0.2})
                                     + "\n" + json.dumps({"step": budget, "test_accuracy": test,
                                                          "train_accuracy": train}) + "\n")
    (d / "config.yaml").write_text(yaml.safe_dump({"scale": {"base_lr": lr}, "model": {"dropout": dropout},
                                                   "optim": {"weight_decay": 5e-4}}))


def test_load_runs_diverged_as_chance_unfinished_left_out_and_tuning_winner(tmp_path):
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        for lr, dr, acc in ((0.025, 0.0, 0.50), (0.025, 0.3, 0.52), (0.04, 0.0, 0.55), (0.04, 0.3, 0.51)):
            _run_dir(sweep, "baseline", 6000, seed, acc + 0.01 * seed, 0.6, lr=lr, dropout=dr)
        for b, acc in ((3000, 0.45), (12000, 0.60), (24000, 0.62)):
            _run_dir(sweep, "baseline", b, seed, acc, 0.7, lr=0.04, dropout=0.0)
        _run_dir(sweep, "bn_x5", 375, seed, 0.50, 0.55, lr=0.2, dropout=0.0)
        _run_dir(sweep, "bn_x5", 1500, seed, 0.63, 0.66, lr=0.2, dropout=0.0)
    _run_dir(sweep, "bn_x5", 750, 0, None, None, status="diverged", lr=0.2, dropout=0.0)
    _run_dir(sweep, "bn_x5", 750, 1, None, None, status="interrupted", lr=0.2, dropout=0.0)
    with pytest.warns(UserWarning, match="interrupted"):
        runs = load_runs(sweep)
    assert len(runs) == 8 + 6 + 4 + 1
    div = runs[(runs.preset == "bn_x5") & (runs.budget_steps == 750)]
    assert div.final_test_accuracy.tolist() == [0.1] and div.final_train_accuracy.tolist() == [0.1]
    x5 = runs[(runs.preset == "bn_x5") & (runs.budget_steps == 1500) & (runs.seed == 0)]
    assert x5.final_train_accuracy.tolist() == [0.66]  # the last metrics record's train_accuracy
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sec = frontier_section(sweep)
    t = sec["frontier_analysis"]["tuning"]
    assert t["budget_steps"] == 6000 and [(r["lr"], r["dropout"]) for r in t["rows"]][t["winner"]] == (0.04, 0.0)
    fr = pd.DataFrame(sec["frontier"])
    base = fr[fr.preset == "baseline"]
    assert sorted(base.budget_steps.unique()) == [3000, 6000, 12000, 24000]  # the losers' 6k runs are tuning only
    assert base[base.budget_steps == 6000].final_test_accuracy.tolist() == [0.55, 0.56]
    assert sec["frontier_analysis"]["target_accuracy"] == pytest.approx(0.62)
    # bn_x5 seed mean: 375: 0.50, 750: 0.10 (only the diverged seed), 1500: 0.63 -> a* = 0.62 first crossed
    # between 750 and 1500: log2 B = log2 750 + (0.62 - 0.10) / (0.63 - 0.10)
    b = 2 ** (math.log2(750) + 0.52 / 0.53)
    assert sec["matched_accuracy"]["bn_x5"]["speedup"] == pytest.approx(24000 / b)
    notes = sec["frontier_analysis"]["notes"]  # codes from the analysis layer, the sweep's warnings as text
    assert {"note": "seed_counts", "preset": "bn_x5", "seeds": [2, 1, 2]} in notes
    assert any("'interrupted', left out" in n for n in notes if isinstance(n, str))  # the warning, noted
    worded = frontier_words(sec)["frontier_analysis"]["notes"]
    assert "bn_x5: the seed counts differ between budgets ([2, 1, 2])" in worded
    assert sec["frontier_analysis"]["speedup"]["bn_x5"]["claim"].startswith("pass rule: S(a*) >= 5")
    assert frontier_section(tmp_path / "empty") is None


def test_single_budget_sweep_has_no_frontier():
    runs = table({"baseline": ([6000], f_lin), "bn_x5": ([1500], f_lin)})
    assert frontier_section(runs) is None


# ----------------------------------------------------------------------------- the ladder decisions


def _ladder_runs(spec: dict, seeds=(0, 1)) -> pd.DataFrame:
    """A loaded-sweep table for the planner: spec = {(preset, budget, lr, dropout): seed-mean accuracy}."""
    rows = [{"preset": p, "budget_steps": b, "seed": s, "final_test_accuracy": a, "final_train_accuracy": a,
             "base_lr": lr, "dropout": d} for (p, b, lr, d), a in spec.items() for s in seeds]
    return pd.DataFrame(rows)


CPU = L.LADDERS["cpu"]
TUNE = {("baseline", 6000, 0.025, 0.0): 0.50, ("baseline", 6000, 0.025, 0.3): 0.52,
        ("baseline", 6000, 0.04, 0.0): 0.56, ("baseline", 6000, 0.04, 0.3): 0.53}


def _next(spec):
    msgs, batches = L.next_batches(_ladder_runs(spec), CPU, L.PRESET_SETS["default"], (0, 1))
    return msgs, [(b.preset, b.budget, b.lrs, b.dropout) for b in batches]


def test_ladder_stages_from_synthetic_results():
    # stage 1: the whole tuning grid in one multirun
    msgs, batches = _next({})
    assert batches == [("baseline", 6000, (0.025, 0.04), (0.0, 0.3))] and "stage 1" in msgs[0]
    # stage 2: the winner (0.04, no dropout) at the remaining rungs, longest first
    msgs, batches = _next(TUNE)
    assert batches == [("baseline", b, (0.04,), (0.0,)) for b in (24000, 12000, 3000)]
    assert "lr=0.04, dropout=0" in msgs[0]
    base = {**TUNE, **{("baseline", b, 0.04, 0.0): a for b, a in ((3000, 0.45), (12000, 0.60))}}
    # 24k gains 0.6 points over 12k: the 48k rung
    assert _next({**base, ("baseline", 24000, 0.04, 0.0): 0.606})[1] == [("baseline", 48000, (0.04,), (0.0,))]
    # 24k gains 0.4 points: the baseline is done (a* = 0.604, cap 24000); stage 3 starts the headline, bn_x5
    done = {**base, ("baseline", 24000, 0.04, 0.0): 0.604}
    assert _next(done)[1] == [("bn_x5", 375, (0.04,), (0.0,))]
    # bn_baseline (stage 4) waits until bn_x5's ladder has stopped
    assert _next({**done, ("bn_x5", 375, 0.04, 0.0): 0.61})[1] == [("bn_baseline", 1500, (0.04,), (0.0,))]
    # bn_x5 below a* and still gaining: next doubling; bn_baseline reached a*: stops
    s3 = {**done, ("bn_baseline", 1500, 0.04, 0.0): 0.61, ("bn_x5", 375, 0.04, 0.0): 0.40,
          ("bn_x5", 750, 0.04, 0.0): 0.50}
    assert _next(s3)[1] == [("bn_x5", 1500, (0.04,), (0.0,))]
    # a doubling that gains < 0.5 points stops a ladder short of a*
    assert _next({**s3, ("bn_x5", 1500, 0.04, 0.0): 0.504})[1] == []
    # capped at the baseline's largest budget (24k): a ladder still gaining stops there
    climb = {**done, ("bn_baseline", 1500, 0.04, 0.0): 0.61}
    climb.update({("bn_x5", b, 0.04, 0.0): 0.30 + 0.02 * i for i, b in enumerate(doubling(375, 7))})
    assert _next(climb)[1] == []
    assert _next({k: v for k, v in climb.items() if k[1] != 24000 or k[0] != "bn_x5"})[1] == [
        ("bn_x5", 24000, (0.04,), (0.0,))]


def test_ladder_winner_is_the_first_of_equals_and_waits_for_every_seed():
    tie = {k: 0.5 for k in TUNE}
    assert L.winner(_ladder_runs(tie), CPU, (0, 1))[:2] == (0.025, 0.0)
    one_seed = _ladder_runs(TUNE, seeds=(0,))
    assert L.winner(one_seed, CPU, (0, 1)) is None


def test_ladder_runs_compose_to_the_presets_with_the_ladder_schedule():
    """Each planned run, composed through the presets: its own budget, the rate halving 5 times over it,
    bn_x5 = Sec. 4.2.1 applied to the winner (5x its rate, no dropout, weight decay / 5)."""
    from bnexp.config.schema import compose_config
    from bnexp.train.lr_schedule import lr_lambda

    base_wd = compose_config(["+experiment=baseline"]).optim.weight_decay
    for preset, b, mult, dropout, wd in (("baseline", 12000, 1, 0.3, base_wd), ("bn_baseline", 1500, 1, 0.3, base_wd),
                                         ("bn_x5", 375, 5, 0.0, base_wd / 5)):
        batch = L.Batch(preset, b, (0.04,), (0.0 if preset == "bn_x5" else 0.3,), (0,))
        ov = [o for o in batch.overrides() if not o.startswith("hydra.")]
        cfg = compose_config(ov)
        assert cfg.trainer.max_steps == b and cfg.lr == pytest.approx(mult * 0.04)
        assert cfg.model.dropout == dropout and cfg.optim.weight_decay == pytest.approx(wd)
        assert lr_lambda(cfg.optim.schedule, cfg.optim.decay_rate, cfg.optim.decay_steps)(b) == pytest.approx(1 / 32)
        assert round(b / cfg.trainer.eval_every) == 4
    assert any(o.startswith("hydra.sweep.subdir='${experiment},") for o in batch.overrides())


def test_plan_totals_and_cli(tmp_path, capsys):
    t = L.plan_table(_ladder_runs({}), CPU, L.PRESET_SETS["default"], (0, 1))
    always = t[t.when == "always"]
    # 4 tuning configurations x 2 seeds x 6k, the baseline at 3k, 12k, 24k, the presets' first rungs
    assert int(always.steps.sum()) == 8 * 6000 + 2 * (3000 + 12000 + 24000) + 2 * (1500 + 375)
    assert t[t.preset == "baseline"].budget.max() == 192000 and t.budget.max() == 192000  # the CPU cap
    assert L.main(["plan", str(tmp_path / "none"), "--jobs", "2", "--steps-per-s", "15"]) == 0
    out = capsys.readouterr().out
    assert "to run, always: 18 runs, 129,750 steps" in out
    assert L.main(["next", str(tmp_path / "none"), "--ladder", "tune=16;lrs=0.025;bn_x5=4"]) == 0
    assert "trainer.max_steps=16" in capsys.readouterr().out
    assert L.main(["next", str(tmp_path), "--ladder", "bogus=1"]) == 2
    assert L.main(["next", str(tmp_path), "--presets", "nope"]) == 2
    assert L.main(["next", str(tmp_path), "--scale", "tpu"]) == 2


def test_frontier_section_of_a_sweep_folder(tmp_path):
    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        for b, acc in ((3000, 0.45), (6000, 0.55)):
            _run_dir(sweep, "baseline", b, seed, acc, 0.6)
        _run_dir(sweep, "bn_x5", 375, seed, 0.50, 0.55, lr=0.125, dropout=0.0)
        _run_dir(sweep, "bn_x5", 750, seed, 0.58, 0.6, lr=0.125, dropout=0.0)
    out = "\n".join(frontier_markdown(frontier_section(sweep)))
    # a* = 0.55 at 6000; bn_x5 crosses it between 375 (0.50) and 750 (0.58): log2 B = log2 375 + 5/8
    assert "budget-accuracy frontier" in out and f"{6000 / 2 ** (math.log2(375) + 5 / 8):.2f}x" in out
    assert frontier_section(tmp_path / "nothing") is None


def test_bnexp_report_has_the_frontier_section_figure_and_json_keys(tmp_path, capsys):
    from bnexp.report import report_main

    sweep = tmp_path / "sweep"
    for seed in (0, 1):
        for b, acc in ((3000, 0.45), (6000, 0.55), (12000, 0.60)):
            _run_dir(sweep, "baseline", b, seed, acc + 0.01 * seed, 0.6)
        for b, acc in ((375, 0.40), (750, 0.52), (1500, 0.61)):
            _run_dir(sweep, "bn_x5", b, seed, acc, 0.7, lr=0.125, dropout=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert report_main([str(sweep)]) == 0
    data = json.loads((sweep / "report.json").read_text())
    assert {"frontier", "matched_accuracy", "frontier_analysis"} <= set(data)
    assert "sec42" not in data  # no steps-to-target table on curves of different budgets
    # a* = 0.605 (seed mean at 12k), bn_x5 crosses it between 750 (0.52) and 1500 (0.61)
    b = 2 ** (math.log2(750) + (0.605 - 0.52) / (0.61 - 0.52))
    assert data["matched_accuracy"]["bn_x5"]["speedup"] == pytest.approx(12000 / b)
    assert data["matched_accuracy"]["bn_x5"]["pass"] is (12000 / b >= 5)
    # the terminal says it in words: the paper's preset name, yes / no, whether the baseline converged
    out = " ".join(capsys.readouterr().out.split())
    verdict = "yes" if 12000 / b >= 5 else "no"
    assert f"BN-x5: S(a*) = {12000 / b:.2f}x; its claim met: {verdict}" in out
    assert "the baseline had not converged" in out  # 12k gained 5 points over 6k
    assert not {"True", "False", "None"} & set(out.replace(";", " ").replace(",", " ").split())
    md = (sweep / "report.md").read_text()
    assert "budget-accuracy frontier" in md and "(frontier.png)" in md
    assert (sweep / "frontier.png").stat().st_size > 0 and "frontier.png" in data["files"]


# ----------------------------------------------------------------------------- held-out seeds (PLAN.md, stage 5)

# decision seeds 0, 1 and held-out seed 2: baseline seed s is f_lin + C[s] on 3k..48k; bn_x5 seed s is that
# baseline seed at 1/K[s] of the budget on 375..12k (f_lin is linear in log2(budget): S(a*_s) = K[s] exactly, as
# 12k * K[s] >= 48k); bn_baseline (seeds 0, 1 only) at 1/2 of the budget, shifted by its own offsets
C, K = {0: 0.0, 1: 0.02, 2: 0.01}, {0: 6.0, 1: 9.0, 2: 5.0}
TUNING = {"budget_steps": 6000, "winner": 0, "config": "lr=0.025, dropout=0, weight decay=0.0005",
          "rows": [{"lr": 0.025, "dropout": 0.0, "config": "lr=0.025, dropout=0, weight decay=0.0005", "seeds": 3,
                    "mean_test_accuracy": 0.6, "per_seed": {"0": 0.6, "1": 0.6, "2": 0.6}},
                   {"lr": 0.04, "dropout": 0.0, "config": "lr=0.04, dropout=0, weight decay=0.0005", "seeds": 2,
                    "mean_test_accuracy": 0.5, "per_seed": {"0": 0.5, "1": 0.5}}]}  # seed 2 ran the winner only
HELD_KEYS = {"decision_seeds", "held_out_seeds", "held_out_presets", "held_out_runs"}


def _seed_runs(seeds, x5_ladder=doubling(375, 6)) -> pd.DataFrame:
    parts = []
    for s in seeds:
        parts.append(table({"baseline": (BASE, lambda b, s=s: f_lin(b) + C[s]),
                            "bn_x5": (x5_ladder, lambda b, s=s: f_lin(K[s] * np.asarray(b)) + C[s])}, seeds=(s,)))
        if s in (0, 1):
            parts.append(table({"bn_baseline": (doubling(1500, 6), lambda b, s=s: f_lin(2 * np.asarray(b)) - C[s])},
                               seeds=(s,)))
    return pd.concat(parts, ignore_index=True)


def _without_held_out(sec: dict) -> dict:
    sec = json.loads(json.dumps(sec))
    fa = sec["frontier_analysis"]
    for k in HELD_KEYS:
        fa.pop(k, None)
    fa["notes"] = [n for n in fa["notes"] if not (isinstance(n, dict) and n["note"] == "held_out_short")]
    for m in sec["matched_accuracy"].values():
        for k in ("held_out_per_seed", "interval", "interval_seeds"):
            m.pop(k, None)
    for d in fa["speedup"].values():
        d.pop("held_out_per_seed", None)
    return sec


def test_held_out_seed_moves_no_decision_and_is_reported_beside_them():
    two = analyze(_seed_runs((0, 1)), TUNING)
    three = analyze(_seed_runs((0, 1, 2)), TUNING)
    assert not HELD_KEYS & set(two["frontier_analysis"])  # without held-out runs: today's keys only
    # (a) a*, S(a*), pass, every claim, the frontiers and their means: identical with seed 2 in the sweep
    assert _without_held_out(three) == json.loads(json.dumps(two))
    fa, ma = three["frontier_analysis"], three["matched_accuracy"]
    assert fa["target_accuracy"] == pytest.approx(f_lin(48000) + 0.01)  # the mean of seeds 0 and 1 (C = 0, 0.02)
    assert {r["seed"] for r in three["frontier"]} == {0, 1}
    assert fa["decision_seeds"] == [0, 1] and fa["held_out_seeds"] == [2]
    assert fa["held_out_presets"] == ["baseline", "bn_x5"]
    assert {(r["preset"], r["seed"]) for r in fa["held_out_runs"]} == {("baseline", 2), ("bn_x5", 2)}
    # (b) the held-out S(a*_2) = K[2] = 5 (a*_2 = f_lin(48k) + 0.01, reached by bn_x5 seed 2 at 48k / 5 = 9,600)
    assert ma["bn_x5"]["held_out_per_seed"] == {"2": pytest.approx(5.0)}
    assert ma["bn_x5"]["speedup_per_seed"] == {"0": pytest.approx(6.0), "1": pytest.approx(9.0)}
    assert "held_out_per_seed" not in ma["bn_baseline"] and "interval" not in ma["bn_baseline"]
    # (c) the geometric mean over seeds 0, 1, 2 and its 95% Student-t interval on the logs, by scipy
    from scipy import stats

    logs = np.log([6.0, 9.0, 5.0])
    lo, hi = stats.t.interval(0.95, df=2, loc=logs.mean(), scale=stats.sem(logs))
    iv = ma["bn_x5"]["interval"]
    assert ma["bn_x5"]["interval_seeds"] == [0, 1, 2] and iv["n"] == 3 and iv["scale"] == "log"
    assert iv["estimate"] == pytest.approx(math.exp(logs.mean()))
    assert (iv["low"], iv["high"]) == (pytest.approx(math.exp(lo)), pytest.approx(math.exp(hi)))


def test_the_terminal_names_the_held_out_seed_and_the_interval_beside_the_headline():
    from bnexp.report.render import render_summary

    three = analyze(_seed_runs((0, 1, 2)), TUNING)
    d = json.loads(json.dumps({"configurations": [], "targets": [], **three}))
    lines = [" ".join(x.split()) for x in render_summary(d, "sweep", "sweep/report.md", 80).splitlines()]
    (x5,) = [x for x in lines if x.startswith("- BN-x5:")]
    assert "; held out (no part in any choice): seed 2 5.00x; over seeds 0, 1, 2: " in x5  # K[2] = 5
    assert "95% t interval [" in x5 and x5.endswith("(n = 3)")
    assert not any("held out" in x for x in lines if x.startswith("- BN-Baseline:"))  # it ran no seed 2


def test_held_out_seed_cut_short_is_noted_and_every_seed_without_tuning_decides():
    runs = pd.concat([_seed_runs((0, 1)), _seed_runs((2,), x5_ladder=doubling(375, 5))], ignore_index=True)
    sec = analyze(runs, TUNING)  # bn_x5 seed 2 ran 375..6k: 5 of the decision seeds' 6 budgets
    assert {"note": "held_out_short", "preset": "bn_x5", "seed": 2, "budgets": 5, "of": 6} in \
        sec["frontier_analysis"]["notes"]
    worded = frontier_words(sec)["frontier_analysis"]["notes"]
    assert "bn_x5: held-out seed 2 ran 5 of the decision seeds' 6 budgets (unequal seed counts per budget; " \
           "no decision uses it)" in worded
    every = analyze(_seed_runs((0, 1, 2)))  # no tuning stage: every seed decides, nothing is held out
    assert not HELD_KEYS & set(every["frontier_analysis"])
    assert set(every["matched_accuracy"]["bn_x5"]["speedup_per_seed"]) == {"0", "1", "2"}


def test_a_held_out_seed_that_never_reaches_its_target_bounds_the_interval_instead_of_leaving_it():
    """bn_x5 seed 2 ran 375..1,500 steps and never reached a*_2 (it needs 48,000 / K[2] = 9,600): its S(a*_2) is at
    most B_baseline(a*_2) / 1,500 = 32, an upper bound that opens the interval's lower side. Leaving the seed out
    would report the two faster seeds' interval (6, 9) as if seed 2 had not run."""
    runs = pd.concat([_seed_runs((0, 1)), _seed_runs((2,), x5_ladder=doubling(375, 3))], ignore_index=True)
    ma = analyze(runs, TUNING)["matched_accuracy"]["bn_x5"]
    assert ma["held_out_per_seed"] == {"2": None} and ma["interval_seeds"] == [0, 1, 2]
    iv = ma["interval"]
    assert iv["n"] == 3 and iv["n_censored"] == 1 and iv["low"] is None and iv["low_open"]
    assert iv["seed_max"] == pytest.approx(48000 / 1500) and iv["seed_max_bound"] == "<="
    assert iv["estimate"] == pytest.approx((6.0 * 9.0 * 32.0) ** (1 / 3)) and iv["estimate_bound"] == "<="


def test_a_held_out_seed_in_another_precision_is_noted():
    """The CPU ladder switched to bf16 after its check: seed 2 of the baseline, run afterwards, is bf16 at the rungs
    where the decision seeds were fp32; the report says so (and nothing where precisions agree or are unknown)."""
    runs = _seed_runs((0, 1, 2))
    runs["precision"] = np.where((runs.seed == 2) | (runs.budget_steps >= 24000), "bf16", "fp32")
    notes = analyze(runs, TUNING)["frontier_analysis"]["notes"]
    assert {"note": "held_out_precision", "preset": "baseline", "seed": 2, "budgets": [3000, 6000, 12000],
            "precision": "bf16", "decision_precision": "fp32"} in notes
    assert [n["preset"] for n in notes if n["note"] == "held_out_precision"] == ["baseline", "bn_x5"]
    worded = frontier_words(analyze(runs, TUNING))["frontier_analysis"]["notes"]
    assert ("baseline: held-out seed 2 ran in bf16 at 3,000, 6,000, 12,000 steps, where the decision seeds ran in "
            "fp32 (it started after the bf16 check; PLAN.md, \"Precision\")") in worded
    runs["precision"] = "bf16"
    assert not [n for n in analyze(runs, TUNING)["frontier_analysis"]["notes"] if n["note"] == "held_out_precision"]


def test_held_out_words_in_report_md_and_the_docs_views():
    from bnexp.report.docs_views import cifar_frontier, cifar_headline, cifar_matched
    from bnexp.report.fmt import format_interval
    from bnexp.analysis.interval import SeedInterval

    two, three = analyze(_seed_runs((0, 1)), TUNING), analyze(_seed_runs((0, 1, 2)), TUNING)
    iv = format_interval(SeedInterval(**three["matched_accuracy"]["bn_x5"]["interval"]), unit="x")
    assert iv.startswith("6.46x, 95% t interval [")  # (6 * 9 * 5)^(1/3) = 6.463
    md3 = "\n".join(frontier_markdown(json.loads(json.dumps(three))))
    head = cifar_headline(json.loads(json.dumps(three)))
    for text in (md3, cifar_matched(json.loads(json.dumps(three)))):
        assert "Decision seeds 0, 1: every seed mean, a\\*, S(a\\*) and pass above is theirs." in text
        assert "seed 2, run for Baseline, BN-x5 only (unequal seed counts per preset)" in text
        assert f"BN-x5: seed 2, held out (no part in any choice): 5.00x; over seeds 0, 1, 2: {iv}." in text
    assert "(seed-mean frontiers of the decision seeds 0, 1)" in head
    assert f"Seed 2, held out (no part in any choice): 5.00x; over seeds 0, 1, 2: {iv}." in head
    assert head.count("held out") == 1  # bn_baseline has no seed 2
    # the frontier table: seed 2's own column, the means labelled as the decision seeds'
    tab = cifar_frontier(json.loads(json.dumps(three)))
    assert "test acc, mean of decision seeds 0, 1 (%)" in tab and "seed 2, held out (%)" in tab
    assert "train acc, mean of decision seeds 0, 1 (%)" in tab and "seed mean" not in tab
    row = next(r for r in tab.splitlines() if r.startswith("| Baseline") and "48,000" in r)
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:6] == [f"{100 * (f_lin(48000) + 0.01):.2f}", f"{100 * f_lin(48000):.2f}",
                          f"{100 * (f_lin(48000) + 0.02):.2f}", f"{100 * (f_lin(48000) + 0.01):.2f}"]
    # without held-out seeds: no word of them anywhere
    md2 = "\n".join(frontier_markdown(json.loads(json.dumps(two))))
    for text in (md2, cifar_headline(json.loads(json.dumps(two))), cifar_frontier(json.loads(json.dumps(two)))):
        assert "held out" not in text and "decision seeds" not in text.lower()
    assert "(seed-mean frontiers over 2 seeds)" in cifar_headline(json.loads(json.dumps(two)))


def test_a_third_seed_of_the_tuning_winner_alone_leaves_the_tuning_table_and_a_star(tmp_path):
    """A sweep folder as stage 5 leaves it: seed 2 ran the tuning winner's 6k run and the ladders, not the other
    tuning settings; the tuning rows, the winner, a* and S(a*) are the decision seeds'."""
    def sweep(root, seeds):
        for seed in seeds:
            if seed < 2:
                for lr, dr, acc in ((0.025, 0.0, 0.50), (0.04, 0.3, 0.51)):
                    _run_dir(root, "baseline", 6000, seed, acc, 0.6, lr=lr, dropout=dr)
            for b, acc in ((3000, 0.45), (6000, 0.55 - 0.2 * (seed == 2)), (12000, 0.60), (24000, 0.62 + 0.1 * seed)):
                _run_dir(root, "baseline", b, seed, acc, 0.7, lr=0.04, dropout=0.0)
            for b, acc in ((375, 0.50), (1500, 0.63 + 0.05 * seed)):
                _run_dir(root, "bn_x5", b, seed, acc, 0.66, lr=0.2, dropout=0.0)
    sweep(tmp_path / "two", (0, 1))
    sweep(tmp_path / "three", (0, 1, 2))
    two, three = frontier_section(tmp_path / "two"), frontier_section(tmp_path / "three")
    t2, t3 = two["frontier_analysis"]["tuning"], three["frontier_analysis"]["tuning"]
    # seed 2's 0.35 at 6k in the winner's mean (0.483 < 0.51) would have made lr=0.04, dropout=0.3 the winner
    assert t3 == t2 and t3["config"] == "lr=0.04, dropout=0, weight decay=0.0005"
    assert three["frontier_analysis"]["decision_seeds"] == [0, 1]
    assert _without_held_out(three) == json.loads(json.dumps(two))
    # seed 2: a*_2 = 0.82 at 24k; bn_x5 seed 2 reaches 0.73 at 1500 only: not reached
    assert three["matched_accuracy"]["bn_x5"]["held_out_per_seed"] == {"2": None}
    # seeds 1 and 2 never reach their a*_s within bn_x5's 1,500 steps: each enters the interval as S <= 24,000 /
    # 1,500 = 16 (an upper bound that opens the lower side), not left out, which would leave seed 0 alone
    iv = three["matched_accuracy"]["bn_x5"]["interval"]
    assert three["matched_accuracy"]["bn_x5"]["interval_seeds"] == [0, 1, 2]
    assert iv["n"] == 3 and iv["n_censored"] == 2 and iv["low"] is None and iv["low_open"]
