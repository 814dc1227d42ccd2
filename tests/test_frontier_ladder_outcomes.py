"""Plan version 2 of the CIFAR-10 frontier on the report side (docs/cifar/PLAN.md; bnexp/report/frontier_plan_v2.py), on
SYNTHETIC frontiers and run folders (no training): the baseline converged by the rule vs stopped at the 192k
cap, each outcome of the baseline_x5 control, baseline_sigmoid never training, which rule stopped each
ladder (ladders.txt), Sec. 4.2's claims beside the paper's, the sweep's cost and the seed advice's command.
Expected values are computed by hand in the comments."""

from __future__ import annotations

import json
import math
import shlex
import warnings

import numpy as np
import pytest
import yaml

from bnexp.analysis.frontier import RATE_ALONE
from bnexp.report.frontier_plan_v2 import control_verdict, convergence, ladder_stops, sweep_cost

# ----------------------------------------------------------------------------- the baseline's convergence


def test_converged_by_the_rule_vs_the_192k_cap_vs_stopped_below_it():
    b = [3000, 6000, 12000, 24000, 48000, 96000]
    c = convergence(b, [0.54, 0.62, 0.70, 0.75, 0.78, 0.783])  # last doubling +0.30 points < 0.5
    assert c["state"] == "converged" and c["last_gain"] == pytest.approx(0.003)
    assert "converged by the rule" in c["sentence"] and "+0.30 points" in c["sentence"]
    c = convergence(b + [192000], [0.54, 0.62, 0.70, 0.75, 0.78, 0.80, 0.81])  # +1.00 point at the cap
    assert c["state"] == "cap" and "reached the 192k cap" in c["sentence"]
    assert "S(a\\*) is measured at the cap's accuracy, a\\* = 81.00%" in c["sentence"]
    # plan version 1's ladder: stopped at 48k, +3.20 points, below the cap
    c = convergence(b[:5], [0.5388, 0.62, 0.6975, 0.75215, 0.78415])
    assert c["state"] == "not_converged" and "+3.20 points" in c["sentence"]
    # ladders.txt says which rule stopped it (a LADDER override's smaller cap)
    c = convergence(b[:5], [0.5388, 0.62, 0.6975, 0.75215, 0.78415],
                    "baseline: stopped by cap: 48,000 steps is its largest budget (78.42%)")
    assert c["state"] == "cap" and "48k cap" in c["sentence"]
    # the converged rule comes first, also at the cap
    assert convergence([96000, 192000], [0.80, 0.802])["state"] == "converged"
    assert convergence([6000], [0.6])["state"] == "unknown"


# ----------------------------------------------------------------------------- the baseline_x5 control

# a* = 0.79 (baseline at 96k, so B_baseline(a*) = 96,000); bn_x5 crosses 0.79 halfway (in log2) between 6,000
# (0.78) and 12,000 (0.80): B_bn_x5(a*) = 6000 * 2^0.5 = 8,485.3; the limit 1.25 x that = 10,606.6
BASE = ([3000, 6000, 12000, 24000, 48000, 96000], [0.54, 0.62, 0.70, 0.75, 0.78, 0.79])
X5 = ([375, 750, 1500, 3000, 6000, 12000], [0.50, 0.60, 0.68, 0.74, 0.78, 0.80])
B_X5 = 6000 * 2 ** 0.5


def verdict(budgets, accs):
    return control_verdict(BASE, X5, (budgets, accs), 0.79)


def test_control_at_chance_through_12k_needs_bn_and_is_undecided_before():
    v = verdict([3000, 6000, 12000], [0.10, 0.10, 0.10])  # diverged runs count as chance
    assert v["outcome"] == "needs_bn" and "the 5x rate needs BN" in v["sentence"]
    assert verdict([3000, 6000], [0.10, 0.12])["outcome"] == "undecided"  # its ladder runs to 12k


def test_control_within_rate_alone_times_bn_x5s_budget_is_the_rate_alone():
    # crosses 0.79 halfway between 6,000 (0.75) and 12,000 (0.83): 8,485.3 <= 10,606.6
    v = verdict([3000, 6000, 12000], [0.60, 0.75, 0.83])
    assert v["outcome"] == "rate_alone" and "the rate alone explains BN-x5's speedup" in v["sentence"]
    assert v["budget_control"] == pytest.approx(B_X5) and v["limit"] == pytest.approx(RATE_ALONE * B_X5)
    assert v["speedup_control"] == pytest.approx(96000 / B_X5) == v["speedup_bn_x5"]


def test_control_reaching_a_star_later_is_not_the_rate_alone_with_bns_factor():
    # crosses 0.79 at 3/4 of the way from 12,000 (0.73) to 24,000 (0.81): 12000 * 2^0.75 = 20,182 > 10,606.6
    v = verdict([3000, 6000, 12000, 24000], [0.55, 0.65, 0.73, 0.81])
    assert v["outcome"] == "bn_adds_speed" and "the rate alone is not BN-x5's speedup" in v["sentence"]
    # S_bn_x5 / S_baseline_x5 = B_control / B_bn_x5 = 2^(log2 12000 + 0.75 - log2 6000 - 0.5) = 2^1.25
    assert v["factor"] == pytest.approx(2 ** 1.25) and "2.38x" in v["sentence"]
    assert v["speedup_bn_x5"] / v["speedup_control"] == pytest.approx(2 ** 1.25)


def test_control_below_a_star_past_the_limit_or_converged_is_decided_and_else_undecided():
    v = verdict([3000, 6000, 12000], [0.55, 0.65, 0.72])  # 12,000 >= 10,606.6, still below a*
    assert v["outcome"] == "bn_adds_speed" and v["decided_at"] == 12000 and v["factor"] is None
    assert "at least 1.25x" in v["sentence"]
    v = verdict([3000, 6000], [0.70, 0.702])  # converged (+0.2 points) below a* at 6,000
    assert v["outcome"] == "bn_adds_speed" and "converged below a" in v["sentence"]
    assert verdict([3000, 6000], [0.55, 0.65])["outcome"] == "undecided"  # 6,000 < 10,606.6, still gaining
    # bn_x5 never reached a*: no comparison
    assert control_verdict(BASE, (X5[0][:4], X5[1][:4]), ([3000, 6000], [0.6, 0.8]), 0.79)["outcome"] == "undecided"


# ----------------------------------------------------------------------------- the whole report on run folders


def _run(root, preset, budget, seed, acc, status="finished", lr=0.025, dropout=0.0, wall=100.0):
    d = root / f"{preset},lr={lr},dropout={dropout},steps={budget},seed={seed}"
    d.mkdir(parents=True)
    step = budget if status == "finished" else budget // 3
    s = {"status": status, "experiment": preset, "max_steps": budget, "step": step, "seed": seed, "lr": lr,
         "final_test_accuracy": acc, "wall_time_s": wall, "cpu": "AMD EPYC (test)"}
    (d / "summary.json").write_text(json.dumps(s))
    rec = {"step": step, "test_accuracy": 0.1 if acc is None else acc, "train_accuracy": 0.1 if acc is None else acc}
    (d / "metrics.jsonl").write_text(json.dumps(rec) + "\n")
    (d / "config.yaml").write_text(yaml.safe_dump({"scale": {"base_lr": lr}, "model": {"dropout": dropout},
                                                   "optim": {"weight_decay": 5e-4}, "trainer": {"max_steps": budget}}))
    return step, wall


# preset -> {budget: (seed 0, seed 1) final test accuracy}; None: the run diverged (chance)
SWEEP = {
    "baseline": {24000: (0.74, 0.76), 48000: (0.77, 0.79), 96000: (0.79, 0.81), 192000: (0.80, 0.82)},
    "bn_x5": {375: (0.50, 0.52), 6000: (0.78, 0.80), 12000: (0.81, 0.83), 24000: (0.82, 0.84)},
    "bn_baseline": {1500: (0.55, 0.57), 24000: (0.79, 0.81), 48000: (0.81, 0.83)},
    "bn_x30": {375: (0.40, 0.42), 12000: (0.80, 0.82), 24000: (0.83, 0.85)},
    "bn_x5_sigmoid": {375: (0.30, 0.32), 12000: (0.66, 0.68)},
    "baseline_sigmoid": {3000: (0.10, 0.10), 6000: (0.10, 0.11), 12000: (0.10, 0.10)},
    "baseline_x5": {3000: (None, None), 6000: (None, None), 12000: (None, None)},
}
LADDERS_TXT = """stage preset budget ...
done: 50 runs
ladders (the rule that stopped each, or what it runs next):
  baseline: stopped by cap: 192,000 steps is its largest budget (81.00%)
  bn_x5: stopped by a*: 82.00% at 12,000 steps reaches a* = 81.00%
  baseline_x5: stopped by chance: 10.00% at 12,000 steps, at or below chance + 5 points
  baseline_sigmoid: stopped by chance: 10.00% at 12,000 steps, at or below chance + 5 points
"""


@pytest.fixture(scope="module")
def v2_report(tmp_path_factory):
    from bnexp.report.build import build_report
    from bnexp.report.render import render_files, render_markdown

    sweep = tmp_path_factory.mktemp("v2") / "sweep"
    steps = secs = 0
    for p, rungs in SWEEP.items():
        for b, accs in rungs.items():
            for seed, a in enumerate(accs):
                st, w = _run(sweep, p, b, seed, a, "finished" if a is not None else "diverged", wall=b / 10 + seed)
                steps, secs = steps + st, secs + w
    (sweep / "ladders.txt").write_text(LADDERS_TXT)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = render_files(build_report(sweep))  # what bnexp report writes, less the figures (seconds of CPU)
    data = json.loads(files["report.json"])
    assert render_markdown(data) + "\n" == files["report.md"].decode()  # report.md is a function of report.json
    return sweep, data, files["report.md"].decode(), steps, secs


def test_frontier_rows_of_every_preset_with_each_seed(v2_report):
    _, data, md, _, _ = v2_report
    have = {(r["preset"], r["budget_steps"], r["seed"]): r["final_test_accuracy"] for r in data["frontier"]}
    want = {(p, b, s): (0.1 if a is None else a) for p, rungs in SWEEP.items() for b, accs in rungs.items()
            for s, a in enumerate(accs)}
    assert have == pytest.approx(want)
    assert {"Baseline-x5", "Baseline-Sigmoid", "BN-x30"} <= {ln.split("|")[1].strip() for ln in md.splitlines()
                                                             if ln.startswith("| ")}


def test_report_states_the_cap_the_stop_rules_and_the_control(v2_report):
    _, data, md, _, _ = v2_report
    fa = data["frontier_analysis"]
    # the baseline's seed means: 80.0% -> 81.0% at 192k, +1.00 point: not converged, at the cap; a* = 81.00%
    assert fa["target_accuracy"] == pytest.approx(0.81) and fa["convergence"]["state"] == "cap"
    assert "reached the 192k cap" in md and "cap's accuracy, a\\* = 81.00%" in md
    assert fa["ladder_stops"][0].startswith("baseline: stopped by cap") and len(fa["ladder_stops"]) == 4
    assert "- bn_x5: stopped by a*: 82.00% at 12,000 steps" in md
    assert fa["control"]["outcome"] == "needs_bn" and "the 5x rate needs BN" in md
    assert data["matched_accuracy"]["baseline_x5"]["pass"] is True  # does not train at 5x the rate


def test_claims_table_beside_the_paper_per_seed(v2_report):
    _, data, md, _, _ = v2_report
    rows = {r["preset"]: r for r in data["frontier_analysis"]["paper_claims"]}
    assert list(rows) == ["baseline", "bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid", "baseline_sigmoid",
                          "baseline_x5"]
    assert "31.0M" in rows["baseline"]["paper"] and "2.1M" in rows["bn_x5"]["paper"]
    assert "13.3M" in rows["bn_baseline"]["paper"] and "74.8%" in rows["bn_x30"]["paper"]
    assert "69.8%" in rows["bn_x5_sigmoid"]["paper"] and "does not train" in rows["baseline_sigmoid"]["paper"]
    # baseline_sigmoid never trains: best 10.00% (seed 0) and 11.00% (seed 1) <= 15%: pass in each seed
    bs = rows["baseline_sigmoid"]
    assert bs["verdict"] == "PASS" and [(d["value"], d["pass"]) for d in bs["per_seed"]] == [
        ("best 10.00%", True), ("best 11.00%", True)]
    assert rows["bn_x5_sigmoid"]["verdict"] == "PASS"  # 67% seed mean > 15% where baseline_sigmoid stays below
    # bn_x30 vs bn_x5 at 24,000 (their largest common budget): 0.83 - 0.82 = +1.00 point in each seed
    assert [d["value"] for d in rows["bn_x30"]["per_seed"]] == ["+1.00 points", "+1.00 points"]
    # bn_x5: a* = 0.81 crossed halfway between 6,000 (0.79) and 12,000 (0.82)? no: seed means 0.79 -> 0.82,
    # t = 2/3: B = 6000 * 2^(2/3) = 9,524.5; B_baseline(a*) = 192,000 (0.80 at 96k): S = 20.16x >= 5: PASS
    s = 192000 / (6000 * 2 ** (2 / 3))
    assert data["matched_accuracy"]["bn_x5"]["speedup"] == pytest.approx(s)
    assert rows["bn_x5"]["verdict"] == "PASS" and f"{s:.2f}x" in rows["bn_x5"]["value"]
    # per seed: seed 0's a*_0 = 0.80, reached by seed 0 of bn_x5 between 6,000 (0.78) and 12,000 (0.81)
    s0 = 192000 / (6000 * 2 ** (2 / 3))
    assert rows["bn_x5"]["per_seed"][0] == {"seed": 0, "value": f"{s0:.2f}x", "pass": True}
    assert rows["baseline_x5"]["verdict"] == "the 5x rate needs BN"
    assert "| baseline_sigmoid | does not train (never better than 1/1000 accuracy) |" in md


def test_claims_table_cells_word_for_word(v2_report):
    """Every text cell of the claims table as the report writes it (the paper's quote, this net's value, the
    per-seed values, the verdict), for the SWEEP above, each control outcome, no control and no convergence, and
    bn_x30 without its comparison with bn_x5. The numbers by hand: the baseline's seed means at 192k are
    (0.80 + 0.82) / 2 = 81.00% (a*); bn_x30 and bn_x5 at 24,000 steps 84.00% and 83.00%; sigmoid BN's best seed
    mean (0.66 + 0.68) / 2 = 67.00% at 12,000 steps; baseline_sigmoid's (0.10 + 0.11) / 2 = 10.50% at 6,000, its
    ladder through 12,000."""
    from bnexp.report.frontier_plan_v2 import paper_claims

    _, data, _, _, _ = v2_report
    fa = data["frontier_analysis"]
    rows = [(r["preset"], r["paper"], r["value"], [d["value"] for d in r["per_seed"]], r["verdict"])
            for r in fa["paper_claims"]]
    assert rows == [
        ("baseline", "72.2% max, reached after 31.0M steps", "a* = 81.00% at 192,000 steps (cap)",
         ["best 80.00%", "best 82.00%"], "-"),
        ("bn_baseline", "72.2% after 13.3M steps: 2.3x fewer", "S(a*) = 5.66x", ["5.66x", "5.66x"], "PASS"),
        ("bn_x5", "72.2% after 2.1M steps: 14.7x fewer (73.0% max)", "S(a*) = 20.16x", ["20.16x", "20.16x"], "PASS"),
        ("bn_x30", "72.2% after 2.7M steps (11.5x fewer); 74.8% max, above BN-x5's 73.0%",
         "84.00% vs bn_x5 83.00% at 24,000 steps; max 84.00%; S(a*) = 16.00x", ["+1.00 points", "+1.00 points"],
         "PASS"),
        ("bn_x5_sigmoid", "trains with sigmoid: 69.8% max", "best 67.00% (through 12,000 steps)",
         ["best 66.00%", "best 68.00%"], "PASS"),
        ("baseline_sigmoid", "does not train (never better than 1/1000 accuracy)",
         "best 10.50% (through 12,000 steps)", ["best 10.00%", "best 11.00%"], "PASS"),
        ("baseline_x5", "not in the paper (Sec. 3.3: without BN a high rate may make gradients explode or vanish)",
         "best 10.00% (through 12,000 steps)", ["best 10.00%", "best 10.00%"], "the 5x rate needs BN"),
    ]
    sec = {k: data[k] for k in ("frontier", "matched_accuracy", "frontier_analysis")}
    words = {"needs_bn": "the 5x rate needs BN", "rate_alone": "the rate alone explains it",
             "bn_adds_speed": "the rate alone is not BN-x5's speedup", "undecided": "undecided"}
    for code, said in words.items():
        assert paper_claims(sec, {"outcome": code}, fa["convergence"])[-1]["verdict"] == said
    bare = paper_claims(sec, None, None)
    assert (bare[0]["value"], bare[-1]["verdict"]) == ("a* = 81.00% at 192,000 steps", "undecided")
    sec["frontier_analysis"] = {**fa, "speedup": {k: v for k, v in fa["speedup"].items() if k != "bn_x30"}}
    rows = {r["preset"]: r for r in paper_claims(sec, fa["control"], {"state": "not_converged"})}
    assert rows["baseline"]["value"] == "a* = 81.00% at 192,000 steps (not converged)"
    assert (rows["bn_x30"]["value"], rows["bn_x30"]["per_seed"]) == ("max 84.00%", [])


def test_a_run_without_a_final_accuracy_is_no_value_in_the_bn_x30_comparison(tmp_path):
    """bn_x30's seed 0 at 24,000 steps with NaN accuracies (a hand edit) is left out of the frontier
    (frontier.runs_table), so its per-seed comparison with bn_x5 is "-", no pass or fail (it read "+nan points
    (fail)"), and seed 1 is still +1.00 point."""
    from bnexp.report.build import build_report
    from bnexp.report.render import render_files, render_markdown

    for p, rungs in SWEEP.items():
        for b, accs in rungs.items():
            for seed, a in enumerate(accs):
                a = math.nan if (p, b, seed) == ("bn_x30", 24000, 0) else a
                _run(tmp_path, p, b, seed, a, "finished" if a is not None else "diverged")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        files = render_files(build_report(tmp_path))
    data = json.loads(files["report.json"])
    x30 = next(r for r in data["frontier_analysis"]["paper_claims"] if r["preset"] == "bn_x30")
    assert [(d["value"], d["pass"]) for d in x30["per_seed"]] == [("-", None), ("+1.00 points", True)]
    assert render_markdown(data) + "\n" == files["report.md"].decode() and "nan" not in files["report.md"].decode()


def test_runs_without_a_final_accuracy_are_left_out_of_the_frontier_with_a_note(tmp_path):
    """The baseline's 192k runs and bn_x5_sigmoid's 12k runs with NaN accuracies (a hand edit): each is left out of
    the frontier with a note naming it, a* is the baseline's best remaining seed mean (80.00% at 96k) and the
    report is written (a* was NaN, its budget None: TypeError in the claims table; an all-NaN row of the frontier
    table: ValueError)."""
    from bnexp.report.build import build_report
    from bnexp.report.render import render_files

    nan_at = {("baseline", 192000), ("bn_x5_sigmoid", 12000)}
    for p, rungs in SWEEP.items():
        for b, accs in rungs.items():
            for seed, a in enumerate(accs):
                _run(tmp_path, p, b, seed, math.nan if (p, b) in nan_at else a, "diverged" if a is None else "finished")
    with pytest.warns(UserWarning, match="left out of the frontier"):
        files = render_files(build_report(tmp_path))
    fa = json.loads(files["report.json"])["frontier_analysis"]
    assert (fa["target_accuracy"], fa["target_budget"]) == pytest.approx((0.80, 96000))
    assert fa["presets"]["bn_x5_sigmoid"]["budgets"] == [375]
    left = [n for n in fa["notes"] if "no final test accuracy" in n]
    assert len(left) == 4 and all(n.endswith("left out of the frontier") for n in left)
    assert "steps=192000,seed=1: no final test accuracy (summary.json's final_test_accuracy" in left[1]
    assert "nan" not in files["report.md"].decode()


def test_cost_of_the_sweep_from_the_runs_summaries(v2_report):
    _, data, md, steps, secs = v2_report
    c = data["frontier_analysis"]["cost"]
    assert c["runs"] == 2 * sum(len(r) for r in SWEEP.values()) == c["timed_runs"]
    assert c["steps"] == steps and c["wall_time_s"] == pytest.approx(secs)
    assert c["steps_per_s"] == pytest.approx(steps / secs) and c["cpus"] == ["AMD EPYC (test)"]
    assert f"{steps / secs:.1f} steps/s per run" in md and "CPU: AMD EPYC (test)" in md
    assert sweep_cost([{"step": 10}])["steps_per_s"] is None  # no wall time recorded


def test_docs_view_renders_plan_v2_and_names_what_a_v1_report_lacks(v2_report):
    from bnexp.report.docs_views import VIEWS, ViewDataError

    _, data, md, _, _ = v2_report
    text = VIEWS["cifar_plan_v2"](data)
    assert "reached the 192k cap" in text and "| baseline_sigmoid |" in text and text in md
    with pytest.raises(ViewDataError, match="frontier_analysis.paper_claims"):
        VIEWS["cifar_plan_v2"]({"frontier_analysis": {"target_accuracy": 0.78}})


def test_ladders_txt_absent_or_without_its_header(tmp_path):
    assert ladder_stops(tmp_path) is None
    (tmp_path / "ladders.txt").write_text("something else\n")
    assert ladder_stops(tmp_path) is None


# ----------------------------------------------------------------------------- the seed advice's command


def test_seed_advice_adds_seed_2_the_plans_way_and_its_command_is_valid(v2_report, monkeypatch):
    """The advice's command is the plan's ``EXTRA_SEEDS=2 ... scripts/reproduce_cifar.sh``; parsed, its
    variables are accepted by the script's orchestrator, whose plan then adds seed 2 at the rungs that ran."""
    from bnexp.designs.orchestrate import cifar_parts
    from bnexp.designs.preflight import Env

    sweep, data, _, _, _ = v2_report
    advice = data["seed_advice"]
    assert "EXTRA_SEEDS=2" in advice and "SEEDS=0,1,2" not in advice
    cmd = shlex.split(advice.split("`")[1])
    env = dict(w.split("=", 1) for w in cmd[:-1])
    assert cmd[-1] == "scripts/reproduce_cifar.sh"
    assert env == {"EXTRA_SEEDS": "2", "PRESETS": "all", "SWEEP_DIR": str(sweep)}
    monkeypatch.chdir(sweep.parent)
    parts = cifar_parts(Env(env), [])  # raises UserError on a bad variable
    assert parts[0].sweep_dir == sweep and "5 extra seeds" in parts[0].plan


def test_ladder_seed_command_keeps_the_presets_the_sweep_ran(tmp_path):
    from types import SimpleNamespace as NS

    from bnexp.report.seed_advice import ladder_seed_command

    g = lambda p: NS(config={"experiment": p})  # noqa: E731
    assert ladder_seed_command([g("baseline"), g("bn_x5"), g("bn_baseline")], [2], tmp_path / "s") == (
        f"EXTRA_SEEDS=2 SWEEP_DIR={tmp_path / 's'} scripts/reproduce_cifar.sh")
    assert ladder_seed_command([g("baseline"), g("bn_x5"), g("bn_x30")], [2, 3], tmp_path) == (
        f"EXTRA_SEEDS=2,3 PRESETS=bn_x5,bn_x30 SWEEP_DIR={tmp_path} scripts/reproduce_cifar.sh")
    assert math.isclose(RATE_ALONE, 1.25) and np.isclose(B_X5, 8485.28, atol=0.01)


def test_cost_counts_a_resumed_runs_training_time_where_its_wall_time_kept_one_session():
    """A run resumed by a bnexp that kept only its last session's wall time (400 s) but summed its training time
    over sessions (3,000 s) costs at least 3,000 s; a run whose wall time covers its training time counts its
    wall time."""
    old = {"step": 90000, "wall_time_s": 400.0, "train_time_s": 3000.0}
    new = {"step": 30000, "wall_time_s": 1100.0, "train_time_s": 1000.0}
    c = sweep_cost([old, new])
    assert c["wall_time_s"] == pytest.approx(4100.0) and c["by_train_time"] == 1
    assert c["steps_per_s"] == pytest.approx(120000 / 4100)
    assert sweep_cost([new])["by_train_time"] == 0 and sweep_cost([new])["wall_time_s"] == pytest.approx(1100.0)
