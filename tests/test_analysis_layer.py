"""One vocabulary below the report (bnexp/analysis/): every claim applies the chance rule, the study cells and the
frontier's runs are views of the one per-run table (a run without a seed is never seed 0), the CIFAR-10 baseline's
tuning winner comes from the one rate rule, one bound type with one way to write it, and the docs' mnist_rates view
only renders report.json. Expected values are computed by hand in each test."""

from __future__ import annotations

import json
import math
import warnings

import pandas as pd
import pytest
import yaml

from test_frontier import _run_dir
from test_studies import make_run, section

from bnexp.analysis.frontier import frontier_section, load_runs, tuning_table
from bnexp.analysis.interval import seed_mean_interval
from bnexp.analysis.rules import CHANCE, Bound, Censored
from bnexp.analysis.runs import find_run_dirs, load_sweep
from bnexp.analysis.study_runs import cells
from bnexp.analysis.tuning import HIGHEST_FINAL, best_rate
from bnexp.report.claims import INCONCLUSIVE, SUPPORTED, Claim
from bnexp.report.docs_numbers import VIEWS
from bnexp.report.fmt import format_interval
from bnexp.report.study_section import CHANCE_POINTS, diff_claim, single_claim

# ----------------------------------------------------------------------------- the chance rule in every claim


def _frame(seeds, left):
    return pd.DataFrame({"seed": seeds, "left_chance": left})


def test_difference_and_single_claims_apply_the_chance_rule():
    """Seed 2's run never left chance: a difference or single-configuration claim that would be supported (every
    value 1.0-1.2 points above 0) is inconclusive and names the seed; without it the same values are supported."""
    claim = Claim("a ends higher than b", "a - b (points)", ">", 0.0)
    a, b = {0: 0.90, 1: 0.91, 2: 0.92}, {0: 0.89, 1: 0.90, 2: 0.908}
    ok, at_chance = _frame([0, 1, 2], [True] * 3), _frame([0, 1, 2], [True, True, False])
    assert diff_claim(claim, a, b, (ok, ok))["verdict"] == SUPPORTED
    row = diff_claim(claim, a, b, (ok, at_chance))
    assert row["verdict"] == INCONCLUSIVE and row["reason"].startswith("seed(s) 2 never left chance")
    values = {0: 1.0, 1: 1.1, 2: 1.2}
    assert single_claim(claim, values, (ok,))["verdict"] == SUPPORTED
    assert single_claim(claim, values, (at_chance,))["verdict"] == INCONCLUSIVE


def test_a_does_not_train_claim_has_chance_as_its_threshold_not_as_a_reason_to_doubt():
    """"Does not train" (threshold: chance in percent, direction "<") states that the runs stay at chance: runs that
    never left chance are its evidence, so the rule is its threshold and they do not make it inconclusive."""
    claim = Claim("does not train", "final test accuracy (%)", "<", CHANCE_POINTS)
    assert CHANCE_POINTS == pytest.approx(100 * CHANCE) == pytest.approx(15.0)
    row = single_claim(claim, {0: 11.35, 1: 9.8, 2: 11.35}, (_frame([0, 1, 2], [False] * 3),))
    assert row["verdict"] == SUPPORTED


def test_a_study_ratio_claim_with_a_run_at_chance_is_inconclusive(tmp_path):
    """The normalizer study: no BN never leaves chance (best 11.35% <= 15%) in seed 1, BN reaches 95% at 1,000 steps.
    The ratio no BN / BN is a lower bound >= 4 in every seed, which the claims used to call supported; the chance
    rule makes "BN reaches 95% in fewer steps than no BN" inconclusive, naming seed 1."""
    for s in range(3):
        make_run(tmp_path, f"bn_{s}", seed=s, lr=0.6, reach=1000)
        make_run(tmp_path, f"no_{s}", seed=s, norm="none", lr=0.6, final=0.1135 if s == 1 else 0.9)
    nm_bn = section(tmp_path, "normalizer")["claims"][0]
    assert nm_bn["per_seed"] == {0: 4.0, 1: 4.0, 2: 4.0} and nm_bn["bounds"] == {0: "lower", 1: "lower", 2: "lower"}
    assert nm_bn["verdict"] == INCONCLUSIVE and nm_bn["reason"].startswith("seed(s) 1 never left chance")


# ----------------------------------------------------------------------------- one per-run table


def test_study_cells_are_the_per_run_tables_completed_runs(tmp_path):
    """cells() reads nothing but the per-run table: its coordinates as the run's config wrote them (ghost 2 stays
    the int 2, no ghost None), the chance rule's column, and the failed run left out."""
    make_run(tmp_path, "a", seed=0, lr=0.6, reach=1000, ghost=2, m=60, depth=4)
    make_run(tmp_path, "b", seed=1, norm="none", lr=1.2, final=0.1135, position="after", act="relu")
    make_run(tmp_path, "c", seed=2, lr=0.6, reach=1000, status="failed")
    sweep = load_sweep(find_run_dirs(tmp_path))
    c = cells(sweep, 0.95).set_index("seed")
    assert list(c.index) == [0, 1]
    assert c.loc[0, ["norm", "ghost", "m", "lr", "depth", "steps", "left_chance"]].tolist() == [
        "ghost", 2, 60, 0.6, 4, 1000, True]
    assert c.loc[1, ["norm", "position", "act", "model", "depth", "left_chance"]].tolist() == [
        "none", "after", "relu", "mlp", 3, False]
    assert math.isnan(c.loc[1, "steps"]) and c.loc[1, "final"] == pytest.approx(0.1135)
    t = sweep.table.set_index(sweep.table["path"].map(lambda p: p.rsplit("/", 1)[-1]))
    assert t.loc["a", "ghost"] == 2 and t.loc["b", "ghost"] is None and t.loc["c", "rate"] == 0.6


def test_a_frontier_run_without_a_seed_is_left_out_never_seed_0(tmp_path):
    """A finished bn_x5 run whose summary and config lack a seed is one warning naming it and no row: it used to
    become seed 0 and average into seed 0's frontier."""
    for seed in (0, 1):
        for b, acc in ((3000, 0.45), (6000, 0.6)):
            _run_dir(tmp_path, "baseline", b, seed, acc, 0.7)
        _run_dir(tmp_path, "bn_x5", 1500, seed, 0.62, 0.7)
    _run_dir(tmp_path, "bn_x5", 3000, 9, 0.2, 0.3)
    odd = tmp_path / "bn_x5,lr=0.025,dropout=0.3,steps=3000,seed=9"
    summary = json.loads((odd / "summary.json").read_text())
    del summary["seed"]
    (odd / "summary.json").write_text(json.dumps(summary))
    assert "seed" not in yaml.safe_load((odd / "config.yaml").read_text())
    with pytest.warns(UserWarning, match=f"{odd}: no seed"):
        runs = load_runs(tmp_path)
    assert len(runs) == 6 and sorted(runs.seed.unique()) == [0, 1] and str(odd) not in set(runs.run_dir)


# ----------------------------------------------------------------------------- one rate rule


def test_the_cifar_baseline_winner_is_the_one_stage_rate_rule():
    """Tuning stage at 6,000 steps, two seeds: (0.025, 0.3) and (0.04, 0.0) tie at a mean of 0.60, (0.04, 0.3) has a
    diverged seed (at chance, 0.1: mean 0.35). The rule: the highest mean final accuracy, ties to the smallest rate,
    so (0.025, 0.3); best_rate with the configuration's columns says the same."""
    rows = []
    for lr, dr, accs, status in ((0.04, 0.0, (0.59, 0.61), "finished"), (0.025, 0.3, (0.58, 0.62), "finished"),
                                 (0.04, 0.3, (0.6, 0.1), "diverged"), (0.025, 0.0, (0.5, 0.52), "finished")):
        rows += [{"preset": "baseline", "budget_steps": 6000, "seed": s, "final_test_accuracy": a, "lr": lr,
                  "dropout": dr, "weight_decay": 5e-4, "status": status if a == 0.1 else "finished"}
                 for s, a in enumerate(accs)]
    runs = pd.DataFrame(rows)
    assert best_rate(runs, steps=None, by=["lr", "dropout", "weight_decay"]) == ((0.025, 0.3, 5e-4), HIGHEST_FINAL)
    t = tuning_table(runs)
    assert [(r["lr"], r["dropout"]) for r in t["rows"]] == [(0.025, 0.0), (0.025, 0.3), (0.04, 0.0), (0.04, 0.3)]
    assert t["winner"] == 1 and t["config"] == "lr=0.025, dropout=0.3, weight decay=0.0005"
    assert [r["mean_test_accuracy"] for r in t["rows"]] == pytest.approx([0.51, 0.6, 0.6, 0.35])


# ----------------------------------------------------------------------------- one bound type


def test_one_bound_type_read_from_names_and_marks_and_written_one_way():
    assert [Bound(v) for v in (None, "", "exact", ">=", "lower", "<=", "upper", "?", "unknown")] == [
        "exact", "exact", "exact", "lower", "lower", "upper", "upper", "unknown", "unknown"]
    assert [Bound(n).mark for n in ("exact", "lower", "upper", "unknown")] == ["", ">=", "<=", "?"]
    assert [Bound(n).written("3.00x") for n in ("exact", "lower", "upper", "unknown")] == [
        "3.00x", ">= 3.00x", "<= 3.00x", "~3.00x"]
    assert Bound("lower").flipped() == "upper" and Bound("unknown").flipped() == "unknown"
    with pytest.raises(ValueError, match="a bound is one of"):
        Bound(">")
    assert Censored(4.0, ">=") == Censored(4.0, "lower") and json.dumps(Censored(4.0, ">=").bound) == '"lower"'
    assert Censored(8.0, "lower") / Censored(2.0, "upper") == Censored(4.0, "lower")
    # the interval takes a bound by name or mark alike and records its mark in report.json
    by_name = seed_mean_interval([2.0, 3.0, 4.0], ["", "lower", None], "log")
    assert by_name == seed_mean_interval([2.0, 3.0, 4.0], ["", ">=", None], "log")
    assert by_name.estimate_bound == ">=" and format_interval(by_name, "x").startswith(">= 2.88x")


def test_a_target_reached_by_the_first_evaluation_is_only_an_upper_bound():
    """Steps to a target are read at evaluations: a run that meets the target at its first evaluation after step 0
    (step e) met it somewhere in (0, e], so its steps are at most e, not e. Two such runs give a ratio that the
    evaluation interval sets (1 whatever the nets do); it must say so ("unknown") instead of a ratio of 1."""
    up = Censored.steps(100, 4000, first_eval=100)
    assert (up.value, up.bound, up.cause, up.budget) == (100.0, "upper", "first_evaluation", 100.0)
    assert Censored.steps(200, 4000, first_eval=100) == Censored(200.0)  # an evaluation below it came first
    assert Censored.steps(None, 4000, first_eval=100) == Censored(4000.0, "lower", "budget", 4000)
    assert Censored.steps(100, 4000, first_eval=math.nan) == Censored(100.0)  # no evaluations recorded
    ratio = Censored.steps(400, 4000, first_eval=100) / up  # no BN exact / BN at most 100
    assert (ratio.value, ratio.bound) == (4.0, "lower")
    assert (up / Censored.steps(100, 4000, first_eval=100)).bound == "unknown"
    from bnexp.report.fmt import censored_why
    assert censored_why(up) == "reached by the first evaluation (step 100): at most that many steps"


def test_two_nets_both_at_the_target_by_the_first_evaluation_make_no_verdict(tmp_path):
    """The normalizer study's claim "BN reaches 95% in fewer steps than no BN" on two nets that both reach 95% by
    their first evaluation (step 100) in every seed: the per-seed ratio is bounded on neither side, so the claim is
    inconclusive; read as exact steps it was 1.00 in every seed, an interval [1, 1] and "not supported", a verdict
    the evaluation interval manufactured. The per-run table records each run's first evaluation after step 0, with
    or without an evaluation at step 0."""
    for s in range(3):
        make_run(tmp_path, f"bn_{s}", seed=s, lr=0.6, reach=100)
        make_run(tmp_path, f"no_{s}", seed=s, norm="none", lr=0.6, reach=100)
    sweep = load_sweep(find_run_dirs(tmp_path))
    assert sweep.table["first_eval"].tolist() == [100.0] * 6
    claim = section(tmp_path, "normalizer")["claims"][0]
    assert claim["bounds"] == {0: "unknown", 1: "unknown", 2: "unknown"}
    assert claim["verdict"] == INCONCLUSIVE
    late = make_run(tmp_path / "late", "r", seed=0, lr=0.6, reach=300, every=150)
    (late / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "test_accuracy": 0.97 if s >= 300 else 0.5})
                                                + "\n" for s in (150, 300, 450)))  # no evaluation at step 0
    assert load_sweep([late]).table["first_eval"].tolist() == [150.0]


# ----------------------------------------------------------------------------- the docs view renders report.json


def _conf(lr, completed, left_chance, max_acc, steps_mean=None):
    return {"label": f"no BN lr={lr}", "bn": False, "config": {"model.init": "normal", "lr": lr,
                                                               "trainer.batch_size": 60},
            "completed": completed, "left_chance": left_chance,
            "seeds": [{"status": "finished", "max_test_accuracy": max_acc}] * completed,
            "steps_to_target": {"0.95": {"mean": steps_mean, "reached": 3, "n": 3} if steps_mean else {}}}


def test_mnist_rates_reads_the_chance_count_and_applies_no_rule():
    """The highest no-BN rate whose every completed seed left chance comes from the configurations' left_chance
    counts as report.json records them: lr 7.2's seeds' best accuracies (0.9) would pass the rule, but its count (2
    of 3) excludes it; the steps at lr 0.6 are the configuration's seed mean."""
    row = {"init": "normal", "variant": "BN", "target": 0.95, "bn_lr": 7.2, "no_bn_lr": 3.6}
    report = {"best_rate_speedups": [row], "configurations": [
        _conf(0.6, 3, 3, 0.97, 9667), _conf(3.6, 3, 3, 0.97), _conf(7.2, 3, 2, 0.9), _conf(14.4, 3, 0, 0.1135)]}
    text = VIEWS["mnist_rates"](report)
    assert "BN's best rate is 7.2 to 95%; no BN's is 3.6 to 95%" in text
    assert "the highest rate at which no BN left chance in every seed is 3.6" in text
    assert "at lr 0.6 no BN needed 9,667 steps (580,020 examples) to reach 95% (3/3 seeds)" in text
    for c in report["configurations"]:
        del c["left_chance"]  # an older report.json: the view says what it lacks, it does not recompute
    with pytest.raises(ValueError, match="left_chance"):
        VIEWS["mnist_rates"](report)


def test_steps_cells_say_at_most_when_every_seed_reached_the_target_by_its_first_evaluation():
    """report.md's and the terminal's steps cells: "<= 12,000" where each seed met the target by its first
    evaluation after step 0 (the CIFAR-10 ladder evaluates every quarter budget), the mean ± std otherwise."""
    from bnexp.report.stats import reach_stat

    assert reach_stat([12000, 12000], [12000.0, 12000.0])["text"] == "<= 12,000"
    assert reach_stat([12000, None], [12000.0, 12000.0])["text"] == "<= 12,000; not reached (1/2)"
    st = reach_stat([6000, 12000], [6000.0, 3000.0])  # seed 1 passed an evaluation below the target first
    assert st["at_first_eval"] == 1 and st["text"] == "9,000 ± 4,243"
    assert reach_stat([6000, 12000])["text"] == "9,000 ± 4,243"  # no evaluation steps known: as before
