"""Run numbers in README.md and docs/**/*.md come from report.json.

The first test is the guard: every ``<!-- bnexp:numbers source=... view=... -->`` block of the committed
pages is regenerated from its source and must equal the committed text. The rule for a source that
does not exist yet (a sweep still running): the block holds exactly the pending sentence, which says
so on the page; once the file exists, the block must match its view. The other tests check the
parser, the rewriter, the command and each view on synthetic report.json data with hand-computed text.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from bnexp.report import report_main
from bnexp.report.claims import Claim, evaluate
from bnexp.report.docs_numbers import (VIEWS, DocsError, check_docs, markdown_files, parse_blocks, pending_text,
                                       rewrite, update_docs)
from bnexp.report.docs_views import ViewDataError

REPO = Path(__file__).resolve().parent.parent


# ----------------------------------------------------------------------------- the guard


def test_every_committed_block_matches_its_report_json():
    """A committed block differs from its source's view (or holds the pending sentence although its source
    exists) -> fail, naming the file, the marker's line and the view."""
    problems = check_docs(REPO)
    assert not problems, "docs blocks out of date with their report.json:\n" + "\n".join(problems)


@pytest.mark.parametrize("source", sorted(str(p.relative_to(REPO)) for p in (REPO / "docs").rglob("report.json")))
def test_committed_docs_reports_regenerate_from_their_report_json(source):
    """Every committed docs report's report.md and report.csv are what the current renderer writes from its
    committed report.json, byte for byte: a change of the report's code that changes what those files say
    shows up here (the numbers in report.json themselves come from the sweep, which is not in the tree)."""
    from bnexp.report.render import render_csv, render_markdown

    folder = (REPO / source).parent
    data = json.loads((REPO / source).read_text())
    assert render_markdown(data) + "\n" == (folder / "report.md").read_text(encoding="utf-8")
    assert render_csv(data).encode("utf-8") == (folder / "report.csv").read_bytes()


def test_committed_blocks_name_registered_views_and_pending_only_when_source_is_absent():
    for f in markdown_files(REPO):
        for b in parse_blocks(f.read_text(), f, REPO):
            assert b.view in VIEWS, f"{f.relative_to(REPO)}:{b.line}: unknown view {b.view}"
            pending = pending_text(b.source) in b.body
            assert pending == (not (REPO / b.source).is_file()), (
                f"{f.relative_to(REPO)}:{b.line} view {b.view}: pending text must be there exactly while "
                f"{b.source} is absent")


# ----------------------------------------------------------------------------- synthetic report.json

def _row(preset, budget, seed, test, train):
    return {"preset": preset, "budget_steps": budget, "seed": seed, "final_test_accuracy": test,
            "final_train_accuracy": train}


def _matched(speedup, per_seed, passed, lower=False, a_star=0.61, converged=False):
    return {"target_accuracy": a_star, "baseline_converged": converged, "speedup": speedup,
            "speedup_is_lower_bound": lower, "speedup_per_seed": per_seed, "pass": passed}


REPORT = {
    "frontier": [_row("bn_x5", 375, 0, 0.55, 0.50), _row("bn_x5", 375, 1, 0.57, 0.54),
                 _row("baseline", 6000, 0, 0.60, 0.61), _row("baseline", 6000, 1, 0.62, 0.63),
                 _row("baseline", 3000, 0, 0.50, 0.48), _row("baseline", 3000, 1, 0.52, 0.50),
                 _row("bn_x5", 750, 0, 0.65, 0.60)],
    "matched_accuracy": {"bn_baseline": _matched(2.0, {"0": 1.5, "1": 2.5}, True),
                         "bn_x5": _matched(4.0, {"0": 3.5, "1": 4.5}, False)},
}


def _cells(table: str) -> list[list[str]]:
    """A pipe table's rows as stripped cells, the separator row left out."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in table.strip().splitlines()]
    return [r for r in rows if not all(set(c) <= set("-:") for c in r)]


def test_cifar_headline_by_hand():
    assert VIEWS["cifar_headline"](REPORT) == (
        "**Result** (seed-mean frontiers over 2 seeds): the target a\\* is the baseline's best seed-mean final "
        "test accuracy, **61.00%**; the baseline had **not converged** (its last budget doubling gained >= 0.5 "
        "points), so S(a\\*) is measured at its best accuracy so far. "
        "BN-x5: S(a\\*) = **4.00x** (per seed 3.50x-4.50x), pass rule S(a\\*) >= 5: **FAIL**. "
        "BN-Baseline: S(a\\*) = **2.00x** (per seed 1.50x-2.50x).")


def test_cifar_headline_bounds_missing_seeds_and_pass_words():
    rep = {"frontier": REPORT["frontier"], "matched_accuracy": {
        "bn_x5": _matched(8.0, {"0": 6.0, "1": None}, True, lower=True, a_star=0.5512, converged=True)}}
    assert VIEWS["cifar_headline"](rep) == (
        "**Result** (seed-mean frontiers over 2 seeds): the target a\\* is the baseline's best seed-mean final "
        "test accuracy, **55.12%**; the baseline **converged** (its last budget doubling gained < 0.5 points). "
        "BN-x5: S(a\\*) = **>= 8.00x** (seed 0: 6.00x; not reached in seed 1), pass rule S(a\\*) >= 5: **PASS**.")
    rep["matched_accuracy"]["bn_x5"] = _matched(None, {"0": None}, None, converged=None)
    text = VIEWS["cifar_headline"](rep)
    assert "S(a\\*) = **not reached** (not reached in seed 0)" in text and "**UNDECIDED**" in text
    assert "whether the baseline converged is unknown" in text
    # the baseline reached a* at its smallest budget: frontier_analysis says the headline is an upper bound
    rep["matched_accuracy"]["bn_x5"] = _matched(2.0, {}, False)
    rep["frontier_analysis"] = {"speedup": {"bn_x5": {"headline": {"bound": "upper"}}}}
    assert "S(a\\*) = **<= 2.00x**, pass rule" in VIEWS["cifar_headline"](rep)


def test_per_seed_bounds_from_frontier_analysis_are_marked():
    """A per-seed S that is a bound (frontier_analysis.speedup[p].per_seed[i].bound) is written with its sign."""
    rep = {"frontier": REPORT["frontier"], "matched_accuracy": {"bn_x5": _matched(9.0, {"0": 8.0, "1": 10.0}, True)},
           "frontier_analysis": {"speedup": {"bn_x5": {"headline": {"bound": "exact"}, "claim": "S >= 5",
                                                       "per_seed": [{"seed": 0, "bound": "exact"},
                                                                    {"seed": 1, "bound": "lower"}]}}}}
    assert "S(a\\*) = **9.00x** (per seed 8.00x-10.00x; seed 1: >= 10.00x)" in VIEWS["cifar_headline"](rep)
    row = _cells(VIEWS["cifar_matched"](rep).split("\n\n", 1)[1])[1]
    assert row == ["BN-x5", "-", "9.00x", "seed 0: 8.00x, seed 1: >= 10.00x", "S >= 5", "yes"]


def test_cifar_frontier_table_by_hand():
    cells = _cells(VIEWS["cifar_frontier"](REPORT))
    assert cells == [
        ["preset", "budget (steps)", "test acc, seed mean (%)", "seed 0 (%)", "seed 1 (%)", "train acc, seed mean (%)"],
        ["Baseline", "3,000", "51.00", "50.00", "52.00", "49.00"],
        ["Baseline", "6,000", "61.00", "60.00", "62.00", "62.00"],
        ["BN-x5", "375", "56.00", "55.00", "57.00", "52.00"],
        ["BN-x5", "750", "65.00", "65.00", "-", "60.00"]]


def test_cifar_matched_table_by_hand():
    text = VIEWS["cifar_matched"](REPORT)
    head, table = text.split("\n\n", 1)
    assert head == ("Target a\\* = **61.00%**, the baseline's best seed-mean final test accuracy; the baseline had "
                    "**not converged** (its last budget doubling gained >= 0.5 points), so S(a\\*) is measured at "
                    "its best accuracy so far.")
    assert _cells(table) == [["preset", "B_preset(a*) (steps)", "S(a*)", "per seed (at each seed's a*_s)", "claim",
                              "pass"],
                             ["BN-Baseline", "-", "2.00x", "seed 0: 1.50x, seed 1: 2.50x", "-", "yes"],
                             ["BN-x5", "-", "4.00x", "seed 0: 3.50x, seed 1: 4.50x", "-", "no"]]


def test_views_read_what_the_frontier_analysis_writes():
    """The views on bnexp.analysis.frontier's own output (through JSON, as report.json holds it). Baseline
    frontier 50/60/64% at 3k/6k/12k: a* = 64%, last doubling +4 points (not converged), B_baseline = 12,000.
    bn_x5 60/64% at 375/750: B = 750, S = 16. bn_baseline 55/62/66% at 1.5k/3k/6k: 64% is halfway between
    3k and 6k in accuracy, so B = 3,000 * 2 ** 0.5 and S = 12,000 / 4,243 = 2 * sqrt(2) = 2.83."""
    from bnexp.analysis.frontier import COLUMNS, analyze
    import pandas as pd

    spec = {"baseline": {3000: 0.50, 6000: 0.60, 12000: 0.64}, "bn_x5": {375: 0.60, 750: 0.64},
            "bn_baseline": {1500: 0.55, 3000: 0.62, 6000: 0.66}}
    runs = pd.DataFrame([_row(p, b, s, a, a - 0.01) for p, ladder in spec.items() for b, a in ladder.items()
                         for s in (0, 1)], columns=COLUMNS)
    rep = json.loads(json.dumps(analyze(runs)))
    assert VIEWS["cifar_headline"](rep) == (
        "**Result** (seed-mean frontiers over 2 seeds): the target a\\* is the baseline's best seed-mean final "
        "test accuracy, **64.00%**; the baseline had **not converged** (its last budget doubling gained >= 0.5 "
        "points), so S(a\\*) is measured at its best accuracy so far. "
        "BN-x5: S(a\\*) = **16.00x** (per seed 16.00x-16.00x), pass rule S(a\\*) >= 5: **PASS**. "
        "BN-Baseline: S(a\\*) = **2.83x** (per seed 2.83x-2.83x).")
    cells = _cells(VIEWS["cifar_matched"](rep).split("\n\n", 1)[1])
    assert [c[0] for c in cells[1:]] == ["BN-Baseline", "BN-x5"] and all(c[4] != "-" for c in cells[1:])
    # B_preset(a*): bn_x5 reaches 64% at 750 steps; bn_baseline at 3,000 * 2 ** 0.5 = 4,243; S as in the headline
    assert [c[1:3] for c in cells[1:]] == [["4,243", "2.83x"], ["750", "16.00x"]]
    assert [c[:3] for c in _cells(VIEWS["cifar_frontier"](rep))[1:4]] == [
        ["Baseline", "3,000", "50.00"], ["Baseline", "6,000", "60.00"], ["Baseline", "12,000", "64.00"]]


def test_claims_view_renders_evaluate_rows():
    row = evaluate(Claim("BN reduces shift", "no-BN / BN scale-free W1", ">", 1.0), {0: 1.5, 1: 2.5, 2: 3.5}, never_learned=[])
    cells = _cells(VIEWS["claims"]({"claims": [row]}))
    assert cells[0][:3] == ["claim", "quantity", "rule"]
    got = dict(zip(cells[0], cells[1], strict=True))
    # mean of 1.5, 2.5, 3.5 is 2.5; sample std (ddof=1) is sqrt((1 + 0 + 1) / 2) = 1
    assert got["claim"] == "BN reduces shift" and got["rule"] == "> 1" and got["per seed"] == "0: 1.5, 1: 2.5, 2: 3.5"
    assert got["mean"] == "2.5" and got["std (ddof=1)"] == "1" and got["verdict"] == row["verdict"]
    assert VIEWS["claims"]({"ics": {"claims": [row]}}) == VIEWS["claims"]({"claims": [row]})
    # the pre-registered matched row's second reading (docs/ics/PLAN.md, amendment) follows its reason
    second = {**row, "second_reading": "schedule-confounded: the matched probes lie at different learning rates"}
    got = dict(zip(*_cells(VIEWS["claims"]({"claims": [second]})), strict=True))
    assert got["reason"] == (row["reason"] + "; second reading: schedule-confounded: the matched probes lie at "
                             "different learning rates") and got["verdict"] == row["verdict"]


def test_cifar_run_names_steps_winner_and_ranges_exact_speedups_by_hand():
    tuning = {"budget_steps": 6000, "winner": 1, "config": "lr=0.025, dropout=0",
              "rows": [{"seeds": 2, "mean_test_accuracy": 0.5}, {"seeds": 2, "mean_test_accuracy": 0.6086},
                       {"seeds": 1, "mean_test_accuracy": 0.4}]}
    curve = [{"speedup": 7.7, "bound": "upper"}, {"speedup": 2.5, "bound": "exact"},
             {"speedup": 3.25, "bound": "exact"}, {"speedup": 2.0, "bound": "lower"}]
    rep = REPORT | {"runs": 10, "sgd_steps": 37500,
                    "frontier_analysis": {"tuning": tuning, "speedup": {"bn_x5": {"curve": curve}}}}
    text = VIEWS["cifar_run"](rep)
    assert "10 runs, 37,500 SGD steps in all" in text
    assert "the winner is lr=0.025, dropout=0 (60.86% seed-mean final test accuracy)" in text
    assert "BN-x5: S(a) from 2.50x to 3.25x" in text  # the bounds (7.7 upper, 2.0 lower) are left out


def _speedup(target, init, per_seed, bn_steps, no_bn_steps, lower=(), bn_lr=7.2, no_bn_lr=3.6):
    """A best_rate_speedups row as best_rate.py writes it (evaluate + the extra fields), through JSON."""
    row = evaluate(Claim(f"BN trains in fewer steps to {target:.0%} ({init} init)", "no-BN / BN steps", ">", 1.0),
                   per_seed, scale="log", never_learned=[]) | {
        "target": target, "init": init, "variant": "BN", "bn": "BN", "no_bn": "no BN", "bn_lr": bn_lr,
        "no_bn_lr": no_bn_lr, "bn_selection": "all seeds", "no_bn_selection": "all seeds", "bn_edge": None,
        "no_bn_edge": None, "bn_steps": bn_steps, "no_bn_steps": no_bn_steps, "bn_budget": 30000,
        "no_bn_budget": 30000, "lower_bound_seeds": list(lower), "left_out": {}}
    return json.loads(json.dumps(row))  # as report.json holds it: seed keys become strings


def test_mnist_views_by_hand():
    normal = _speedup(0.97, "normal", {1: 2.0, 2: 3.0, 3: 4.0}, {1: 2000, 2: 1000, 3: 1000},
                      {1: 4000, 2: 3000, 3: 4000})
    xavier = _speedup(0.97, "xavier", {1: 1.0, 2: 30.0}, {1: 1000, 2: 1000}, {1: 1000, 2: 30000}, lower=[2],
                      bn_lr=3.6, no_bn_lr=1.2)
    text = VIEWS["mnist_headline"]({"best_rate_speedups": [normal, xavier]})
    paras = text.split("\n\n")
    assert len(paras) == 2 and paras[0].startswith("**normal init**") and paras[1].startswith("**xavier init**")
    # geometric mean of 2, 3, 4 = 24^(1/3) = 2.88; scipy's t interval of the mean log ratio, exponentiated
    logs = np.log([2.0, 3.0, 4.0])
    lo, hi = np.exp(sps.t.interval(0.95, 2, loc=logs.mean(), scale=logs.std(ddof=1) / np.sqrt(3)))
    assert (f"to 97% **2.88x, 95% t interval [{lo:.3g}x, {hi:.3g}x]; per seed 2x to 4x (n = 3); seeds 1: 2.00x, "
            f"2: 3.00x, 3: 4.00x**, {normal['verdict']}") in paras[0]
    # two seeds: geometric mean sqrt(30) = 5.48, the lower bound marked; fewer than 3 seeds: inconclusive
    assert "5.48x" in paras[1] and "1: 1.00x, 2: >= 30.00x" in paras[1] and xavier["verdict"] == "inconclusive"
    # seeds read back from JSON are strings: still in numeric order (10 after 9), bounds still marked
    many = _speedup(0.97, "normal", {9: 2.0, 10: 3.0}, {9: 100, 10: 100}, {9: 200, 10: 300}, lower=[10])
    assert "seeds 9: 2.00x, 10: >= 3.00x**" in VIEWS["mnist_headline"]({"best_rate_speedups": [many]})
    cells = _cells(VIEWS["mnist_best_rate"]({"best_rate_speedups": [normal, xavier]}))
    detail = [c for c in cells if c[0] in ("normal", "xavier")]
    assert detail[0][:4] == ["normal", "97%", "7.2", "1: 2,000, 2: 1,000, 3: 1,000"]
    assert detail[1][-1] == "1: 1.00, 2: >= 30.00"
    with pytest.raises(ValueError, match="best_rate_speedups"):
        VIEWS["mnist_best_rate"]({"frontier": []})


# ----------------------------------------------------------------------------- parser and rewriter

OPEN = "<!-- bnexp:numbers source=docs/r.json view=cifar_headline -->"
CLOSE = "<!-- /bnexp:numbers -->"


def _repo(tmp_path: Path, page: str, report: dict | None = REPORT) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "docs").mkdir(exist_ok=True)
    if report is not None:
        (tmp_path / "docs" / "r.json").write_text(json.dumps(report))
    (tmp_path / "README.md").write_text(page)
    return tmp_path / "README.md"


def _ics_conf(label, variant, ks, steps=None):
    st = ({"n": 2, "reached": 2, "not_reached": 0, "mean": steps, "std": 0.0, "text": f"{steps:,} ± 0"} if steps
          else {"n": 2, "reached": 0, "not_reached": 2, "mean": None, "std": None, "text": "not reached"})
    return {"label": label, "completed": 2, "final_test_accuracy": {"mean": 0.5, "std": 0.0, "n": 2},
            "steps_to_target": {"0.6": st},
            "ics": {"variant": variant, "measures": {"shift.ks_first": {"mean": ks, "std": 0.0, "n": 2}}}}


def test_ics_overview_orders_bn_noisy_by_strength_no_bn_by_hand():
    confs = [_ics_conf("no BN", "no BN", 0.5), _ics_conf("noisy BN noise_scale=10", "noisy BN", 0.25),
             _ics_conf("BN", "BN", 0.125, steps=2700), _ics_conf("noisy BN noise_scale=3", "noisy BN", 0.2)]
    strength = [{"label": "noisy BN noise_scale=10", "noise_scale": 10, "final_train_accuracy": {"mean": 0.175}},
                {"label": "noisy BN noise_scale=3", "noise_scale": 3, "final_train_accuracy": {"mean": 0.33}},
                {"label": "BN", "noise_scale": None, "final_train_accuracy": {"mean": 0.55}},
                {"label": "no BN", "noise_scale": None}]
    text = VIEWS["ics_overview"]({"configurations": confs, "ics": {"main_target": 0.6,
                                                                    "noise_strength": {"rows": strength}}})
    lines = text.splitlines()
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines]
    assert cells[0][1:] == ["BN", "noisy BN noise_scale=3", "noisy BN noise_scale=10", "no BN"]
    row = {c[0]: c[1:] for c in cells[2:]}
    assert row["steps to 60%"] == ["2,700 ± 0", "not reached", "not reached", "not reached"]
    assert row["final train accuracy (%, noise on)"] == ["55.00", "33.00", "17.50", "-"]
    assert row["KS distance from the start, mean over hidden layers (scale-free)"] == ["0.125", "0.2", "0.25", "0.5"]
    assert row["cos(G, G')"] == ["-"] * 4  # a measure the records lack
    with pytest.raises(ViewDataError, match="report.json has no ics"):
        VIEWS["ics_overview"]({"configurations": confs})


def test_ics_def21_writes_each_def21_row_per_setting_and_nothing_else():
    """The Def. 2.1 sentence (docs/ics, README): every row of Santurkar et al.'s Def. 2.1 as defined with its
    value and verdict, one line per setting when the claims have several; other rows, and rows whose measure no
    run recorded ("needs"), are left out; a report without such rows is refused by name."""
    from bnexp.report.ics_verdicts import DEF21_VIEWS

    def row(view, setting, ratios, verdict="supported", needs=None):
        r = evaluate(Claim("BN reduces gradient ICS", "BN / no-BN", "<", 1.0), ratios, never_learned=[])
        return json.loads(json.dumps({**r, "view": view, "setting": setting, "verdict": verdict, "needs": needs}))

    same, matched = DEF21_VIEWS[0], DEF21_VIEWS[1]
    one = VIEWS["ics_def21"]({"claims": [row("same steps", "", {0: 0.9, 1: 1.1, 2: 1.0}),
                                         row(same, "", {0: 0.4, 1: 0.5, 2: 0.45})]})
    assert "\n" not in one and one.count("*supported*") == 1 and "raw L2, same steps 0.45 [" in one
    assert "Def. 2.1 raw L2" not in one  # the sentence names Def. 2.1 once
    two = VIEWS["ics_def21"]({"claims": [row(same, "optim.schedule=constant", {0: 0.4, 1: 0.5, 2: 0.45}),
                                         row(matched, "optim.schedule=exponential", {}, "premise not met")]})
    lines = two.splitlines()
    assert lines[1].startswith("- optim.schedule=constant: raw L2, same steps 0.45 [")
    assert lines[2] == "- optim.schedule=exponential: raw L2, matched progress at equal rates *premise not met*."
    with pytest.raises(ViewDataError, match="no Def. 2.1 row"):
        VIEWS["ics_def21"]({"claims": [row(same, "", {}, "inconclusive", needs="monitor.grad_ics")]})


def _study_report(wall=750.0, jobs=2, calls=1):
    c1 = evaluate(Claim("BN before g is faster", "steps, after / before", ">", 1.0), {0: 1.8, 1: 2.0, 2: 2.2}, never_learned=[])
    c2 = evaluate(Claim("LayerNorm keeps up", "steps, LN / BN", "<", 1.25), {0: 3.0, 1: None, 2: None}, never_learned=[])
    sec = {"name": "placement", "claims": [json.loads(json.dumps(c)) for c in (c1, c2)], "runs": 72,
           "wall_time_s": wall, "jobs": jobs, "calls": calls, "findings": ["MLP sigmoid: best rate 0.6."],
           "columns": [["position", "position"], ["to_target", "steps to 95%"]],
           "table": [{"position": "before", "to_target": {"mean": 1200.0, "std": 100.0, "n": 3}},
                     {"position": "after", "to_target": {"mean": 2400.0, "std": None, "n": 1}}]}
    return {"study": sec}


def test_study_views_by_hand():
    text = VIEWS["study"](_study_report())
    assert text.startswith("72 completed runs; measured wall time 12.5 min (2 parallel jobs, 1 call of "
                           "scripts/study.sh).")  # 750 s
    assert "| before     | 1,200 ± 100    |" in text and "| after      | 2,400 (1 seed) |" in text
    assert "- MLP sigmoid: best rate 0.6." in text
    line = VIEWS["study_verdicts"](_study_report(wall=None))
    # mean of 1.8, 2.0, 2.2 = 2, 2 -+ 4.303 * 0.2 / sqrt(3) = [1.503, 2.497]; the second claim has one seed
    assert line.startswith("- BN before g is faster: *supported* (2, 95% t interval [1.5, 2.5]; per seed 1.8 to 2.2 "
                           "(n = 3))\n"
                           "- LayerNorm keeps up: *inconclusive*")
    assert line.endswith("72 runs, wall time not recorded.")
    assert "3 calls" in VIEWS["study"](_study_report(calls=3))
    # the page's Holm family, from report.json's multiplicity (a report written before it has none: nothing said)
    counted = VIEWS["study"]({**_study_report(), "multiplicity": {"claims": 2, "claims_tested": 1}})
    assert counted.startswith("72 completed runs; measured wall time 12.5 min (2 parallel jobs, 1 call of "
                              "scripts/study.sh). 1 claim tested, the family of the Holm adjustment (1 more without "
                              "a value).")
    assert "claims tested" not in text
    with pytest.raises(ViewDataError, match="report.json has no study"):
        VIEWS["study"]({"claims": []})


def test_parse_blocks_lines_attributes_and_fenced_code(tmp_path):
    text = "\n".join(["# t", OPEN, "old", CLOSE, "```", OPEN, "```", "",
                      "<!-- bnexp:numbers view=claims source=docs/ics/report.json -->", CLOSE, ""])
    blocks = parse_blocks(text, tmp_path / "README.md", tmp_path)
    assert [(b.line, b.source, b.view, b.body) for b in blocks] == [
        (2, "docs/r.json", "cifar_headline", "old"), (9, "docs/ics/report.json", "claims", "")]


@pytest.mark.parametrize("lines, line, words", [
    ([OPEN, "x"], 1, "never closed"),
    (["a", CLOSE], 2, "without an opening"),
    ([OPEN, OPEN, CLOSE], 2, "inside the block opened at line 1"),
    (["<!-- bnexp:numbers source=docs/r.json -->", CLOSE], 1, "lacks view"),
    (["<!-- bnexp:numbers source=docs/r.json view=a color=red -->", CLOSE], 1, "cannot read 'color=red'"),
    (["<!-- bnexp:numbers source=a.json view=a view=b -->", CLOSE], 1, "view is given twice"),
])
def test_malformed_markers_name_file_and_line(tmp_path, lines, line, words):
    with pytest.raises(DocsError, match=rf"^README\.md:{line}: .*{words}"):
        parse_blocks("\n".join(lines), tmp_path / "README.md", tmp_path)


def test_rewrite_fills_blocks_keeps_the_rest_and_is_idempotent(tmp_path):
    page = "\n".join(["# Title", "before", OPEN, "stale 5.0x", CLOSE, "after  ", ""])
    path = _repo(tmp_path, page)
    out, result = rewrite(page, path, tmp_path)
    assert out == "\n".join(["# Title", "before", OPEN, "", VIEWS["cifar_headline"](REPORT), "", CLOSE, "after  ", ""])
    assert [(b.line, changed, pending) for b, changed, pending in result] == [(3, True, False)]
    again, result = rewrite(out, path, tmp_path)
    assert again == out and [c for _, c, _ in result] == [False]


def test_a_tampered_block_is_detected(tmp_path):
    path = _repo(tmp_path, "\n".join(["# T", OPEN, CLOSE, ""]))
    update_docs([str(path)], echo=lambda s: None)
    assert check_docs(tmp_path) == []
    good = path.read_text()
    path.write_text(good.replace("**4.00x**", "**4.10x**"))
    assert check_docs(tmp_path) == ["README.md:2 view cifar_headline: the committed text differs from docs/r.json; "
                                    "run `bnexp report --update-docs README.md`"]


def test_pending_while_the_source_is_absent_then_it_must_match(tmp_path):
    path = _repo(tmp_path, "\n".join(["# T", OPEN, CLOSE, ""]), report=None)
    assert update_docs([str(path)], echo=lambda s: None) == [path]
    assert path.read_text() == "\n".join(["# T", OPEN, "", pending_text("docs/r.json"), "", CLOSE, ""])
    assert check_docs(tmp_path) == []
    # the source appears: the pending sentence is now a difference, until --update-docs writes the numbers
    (tmp_path / "docs" / "r.json").write_text(json.dumps(REPORT))
    assert [p.split(":")[:2] for p in check_docs(tmp_path)] == [["README.md", "2 view cifar_headline"]]
    update_docs([str(path)], echo=lambda s: None)
    assert check_docs(tmp_path) == [] and "**4.00x**" in path.read_text()


def test_numbers_without_their_source_are_an_error(tmp_path):
    _repo(tmp_path, "\n".join(["# T", OPEN, "BN-x5: 4.3x", CLOSE, ""]), report=None)
    with pytest.raises(DocsError, match=r"^README\.md:2: the source docs/r\.json .* does not exist"):
        check_docs(tmp_path)


@pytest.mark.parametrize("report, marker, words", [
    (REPORT, "<!-- bnexp:numbers source=docs/r.json view=nope -->", "unknown view 'nope'"),
    ({"frontier": []}, OPEN, "view cifar_headline cannot render docs/r.json: report.json has no matched_accuracy"),
    (REPORT, "<!-- bnexp:numbers source=/abs/r.json view=claims -->", "must be a report.json path relative"),
    (REPORT, "<!-- bnexp:numbers source=docs/r.json view=claims -->", "report.json has no claims"),
])
def test_unrenderable_blocks_name_file_and_line(tmp_path, report, marker, words):
    _repo(tmp_path, "\n".join(["# T", "", marker, CLOSE, ""]), report=report)
    with pytest.raises(DocsError, match=rf"^README\.md:3: .*{words}"):
        check_docs(tmp_path)


# ----------------------------------------------------------------------------- the command


def test_report_update_docs_command(tmp_path, monkeypatch, capsys):
    page = "\n".join(["# T", OPEN, CLOSE, ""])
    path = _repo(tmp_path, page)
    (tmp_path / "docs" / "page.md").write_text("no blocks here\n")
    monkeypatch.chdir(tmp_path / "docs")  # the repository root is found above the working folder
    assert report_main(["--update-docs"]) == 0
    assert "**4.00x**" in path.read_text() and (tmp_path / "docs" / "page.md").read_text() == "no blocks here\n"
    assert "1 file rewritten" in capsys.readouterr().out
    before = path.read_bytes()
    assert report_main(["--update-docs", str(path)]) == 0  # idempotent
    assert path.read_bytes() == before and "0 files rewritten" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["--update-docs", "README.md"], "README.md:2: unknown view 'nope'"),
    (["--update-docs", "missing.md"], "missing.md: no such markdown file"),
    (["sweep_folder", "--update-docs"], "takes markdown files, not a sweep folder"),
    (["--targets", "0.9", "--update-docs", "README.md"], "takes no --targets"),
])
def test_report_update_docs_errors_are_one_line_exit_2_and_write_nothing(tmp_path, monkeypatch, capsys, args, words):
    page = "\n".join(["# T", "<!-- bnexp:numbers source=docs/r.json view=nope -->", "old", CLOSE, ""])
    path = _repo(tmp_path, page)
    monkeypatch.chdir(tmp_path)
    assert report_main(args) == 2
    err = capsys.readouterr().err
    assert err.count("bnexp report: error:") == 1 and words in " ".join(err.split()) and "Traceback" not in err
    assert path.read_text() == page


# ----------------------------------------------------------------------------- the scripts' copy into docs/


def test_scripts_copy_the_report_into_docs_only_for_the_default_run(tmp_path, monkeypatch, capsys):
    """The orchestrator's copy: the report's files and figures (not the runs' files) reach the docs folder; a
    run with extra overrides gets no docs folder; an empty DOCS_DIR copies nothing."""
    from bnexp.designs.orchestrate import copy_report
    from bnexp.designs.preflight import Env

    sweep = tmp_path / "sweep"
    (sweep / "bn=true,seed=0").mkdir(parents=True)
    for name in ("report.md", "report.json", "report.csv", "accuracy_vs_steps.png", "ics_gradient.png",
                 "multirun.yaml", "bn=true,seed=0/percentiles.png", "bn=true,seed=0/summary.json"):
        (sweep / name).write_text(name)
    monkeypatch.chdir(tmp_path)
    env = Env({})
    assert env.docs_dir("DOCS_DIR", "docs/mnist", True) == "docs/mnist"
    assert env.docs_dir("DOCS_DIR", "docs/mnist", False) == ""
    assert Env({"DOCS_DIR": ""}).docs_dir("DOCS_DIR", "docs/mnist", True) == ""
    copy_report(sweep, "docs/x")
    copy_report(sweep, "")
    assert sorted(p.name for p in (tmp_path / "docs" / "x").iterdir()) == [
        "accuracy_vs_steps.png", "ics_gradient.png", "report.csv", "report.json", "report.md"]
    assert (tmp_path / "docs" / "x" / "report.json").read_text() == "report.json"
    assert sorted(p.name for p in (tmp_path / "docs").iterdir()) == ["x"]
    # a sweep whose report failed: nothing copied, and the script says so instead of "copied"
    capsys.readouterr()
    copy_report(tmp_path / "no_report", "docs/y")
    out = capsys.readouterr()
    assert "nothing copied" in out.err and "copied the report" not in out.out
    assert not (tmp_path / "docs" / "y").exists()


@pytest.fixture(scope="module")
def mnist_tuning(tmp_path_factory) -> Path:
    """A complete MNIST tuning stage (every grid of bnexp/designs/mnist.py on the tuning seeds, each run
    reaching 95% at 1,000 steps, the middle rate of each grid at 750: a choice inside the grid; no run reaches 97%,
    so that target's choice is the smallest rate, and the grid-edge rule's added rate below it, which fails too,
    is there), so that the ICS study can choose its rates (docs/ics/PLAN.md)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_report import make_run

    from bnexp.designs import mnist

    root = tmp_path_factory.mktemp("mnist_tuning")
    for b in mnist.BLOCKS:
        for lr in (*b.rates, min(b.rates) / 2):
            for seed in mnist.SEEDS:
                reach = 750 if lr == sorted(b.rates)[len(b.rates) // 2] else 1000
                make_run(root, mnist.run_name(b, lr, seed), bn=b.bn, lr=lr, seed=seed, knots=[(0, 0.1), (reach, 0.95)],
                         max_steps=2000, every=250, targets=[0.95])
    return root


@pytest.mark.parametrize("args, env, copied", [
    ((), {}, {"mnist", "cifar"}),
    (("trainer.max_steps=40",), {}, set()),
    ((), {"NOISE_SCALES": "1,3"}, set()),
    ((), {"CIFAR_OVERRIDES": "scale.baseline_steps=3000"}, {"mnist"}),
    ((), {"CIFAR_OVERRIDES": "scale.baseline_steps=3000", "CIFAR_DOCS_DIR": "docs/ics/cifar"}, {"mnist", "cifar"}),
    ((), {"MNIST_DOCS_DIR": ""}, {"cifar"}),
])
def test_ics_study_copies_into_docs_ics_for_the_default_run(tmp_path, args, env, copied, mnist_tuning):
    """scripts/ics_study.sh's copy rule, with a stand-in `bnexp` on PATH (trains nothing; `report` writes a
    report.json and a figure) in a copy of scripts/, so the repository's docs/ are never touched."""
    import os
    import shutil
    import subprocess

    shutil.copytree(REPO / "scripts", tmp_path / "scripts")
    fake = tmp_path / "bin" / "bnexp"
    fake.parent.mkdir()
    fake.write_text('#!/usr/bin/env bash\nif [[ "$1" == report ]]; then mkdir -p "$2"; echo "{}" > "$2/report.json"; '
                    'echo png > "$2/ics_gradient.png"; fi\n')
    fake.chmod(0o755)
    r = subprocess.run(["bash", "scripts/ics_study.sh", *args], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}",
                                            JOBS="1", VERIFY_CHECKSUMS="false", MNIST_TUNING_DIR=str(mnist_tuning),
                                            **env))
    assert r.returncode == 0, r.stderr
    docs = tmp_path / "docs" / "ics"
    got = {p.name for p in docs.iterdir()} if docs.exists() else set()
    assert got == copied
    for part in copied:
        assert sorted(p.name for p in (docs / part).iterdir()) == ["ics_gradient.png", "report.json"]


def test_cifar_claims_lists_each_preset_rule_value_and_verdict_by_hand():
    """README's list of Sec. 4.2's claims: one entry per claimed preset from frontier_analysis.paper_claims (the
    reference baseline, verdict "-", left out), in order; plan version 1's report.json has no such claims."""
    fa = {"paper_claims": [
        {"preset": "baseline", "rule": "reference", "value": "a* = 80.50%", "verdict": "-"},
        {"preset": "bn_x5", "rule": "S(a*) >= 5", "value": "S(a*) = 3.74x", "verdict": "FAIL"},
        {"preset": "baseline_x5", "rule": "at chance: needs BN", "value": "best 10.00%", "verdict": "the 5x rate needs BN"}]}
    text = VIEWS["cifar_claims"]({"frontier_analysis": fa})
    assert text == ("Sec. 4.2's claims on this net (decision seeds' means; docs/cifar has each beside the paper's): "
                    "BN-x5 (S(a*) >= 5; S(a*) = 3.74x): **FAIL**; Baseline-x5 (at chance: needs BN; best 10.00%): "
                    "**the 5x rate needs BN**.")
    with pytest.raises(ViewDataError, match="frontier_analysis.paper_claims"):
        VIEWS["cifar_claims"]({"frontier_analysis": {}})
