"""Gradient ICS at matched training progress (bnexp/report/ics_stats.py, docs/ics/PLAN.md), the pairing of
networks that ran at their own rates, the design record and the claims table's views: synthetic records,
hand-computed expectations."""

import json
import math

import pandas as pd
import pytest

from bnexp.report.groups import ConfigGroup, comparison_sets, pair_label
from bnexp.analysis.ics_design import design_fields, ignored_keys, read_design, write_design
from bnexp.report.ics_stats import (common_level, first_at_or_below, matched_by_seed, matched_progress,
                                       progress_records)
from bnexp.report.ics_verdicts import MATCHED, SPECS

# (step, train_loss, gradient ICS): BN learns fast, no BN slowly
BN = [(1000, 0.6, 1.0), (2000, 0.2, 0.5), (3000, 0.1, 0.4)]
NO_BN = [(1000, 2.3, 3.0), (2000, 1.0, 2.0), (3000, 0.5, 1.0)]


def test_matched_progress_compares_where_both_first_reach_the_slower_nets_lowest_loss():
    m = matched_progress(BN, NO_BN)
    # level = max(lowest BN 0.1, lowest no BN 0.5) = 0.5; BN first <= 0.5 at 2000 (0.2), no BN at 3000 (0.5)
    assert m.level == 0.5 and (m.step_a, m.step_b) == (2000, 3000)
    assert (m.value_a, m.value_b, m.ratio) == (0.5, 1.0, 0.5)
    # the same-step view at the last probe would give 0.4 / 1.0: the views differ on these records
    assert BN[-1][2] / NO_BN[-1][2] == pytest.approx(0.4)
    swapped = matched_progress(NO_BN, BN)
    assert (swapped.step_a, swapped.step_b, swapped.ratio) == (3000, 2000, 2.0)


def test_the_docstring_example():
    m = matched_progress([(1000, 1.0, 4.0), (2000, 0.5, 2.0)], [(1000, 2.0, 1.0), (2000, 0.8, 3.0)])
    assert m.level == 0.8 and (m.step_a, m.step_b) == (2000, 2000) and m.ratio == pytest.approx(2 / 3)


def test_the_first_record_at_or_below_the_level_counts_not_the_lowest():
    a = [(4, 0.3, 4.0), (2, 0.4, 2.0), (1, 1.0, 1.0), (3, 0.6, 3.0)]  # unsorted; the loss dips, rises, dips
    assert first_at_or_below(a, 0.5) == (2, 0.4, 2.0)
    assert first_at_or_below(a, 0.4) == (2, 0.4, 2.0)  # at the level counts (<=)
    assert first_at_or_below(a, 0.29) is None
    m = matched_progress(a, [(1, 0.5, 10.0)])  # level max(0.3, 0.5) = 0.5
    assert (m.step_a, m.step_b, m.ratio) == (2, 1, 0.2)


def test_records_without_a_finite_loss_or_value_are_skipped():
    a = [(1000, None, 1.0), (2000, math.nan, 1.0), (3000, 0.4, math.inf), (4000, 0.4, 2.0)]
    assert common_level(a, [(1000, 0.3, 1.0)]) == 0.4
    m = matched_progress(a, [(1000, 0.3, 1.0)])
    assert (m.step_a, m.value_a, m.step_b) == (4000, 2.0, 1000)
    assert matched_progress([], NO_BN) is None and matched_progress([(1, None, 1.0)], NO_BN) is None
    assert matched_progress(BN, [(1000, 2.0, 0.0)]).ratio is None  # a zero denominator: no ratio


def test_matched_by_seed_pairs_seed_s_with_seed_s():
    got = matched_by_seed({0: BN, 1: BN, 2: []}, {0: NO_BN, 2: NO_BN, 3: NO_BN})
    assert set(got) == {0, 1, 2, 3} and got[0].ratio == 0.5
    assert got[1] is None and got[2] is None and got[3] is None


def test_progress_records_read_the_loss_at_or_before_each_probe_and_average_layers():
    metrics = pd.DataFrame({"run": ["r"] * 4 + ["q"], "step": [0, 500, 1000, 1500, 500],
                            "train_loss": [None, 2.0, 1.5, "1.0", 0.7]})
    grad = pd.DataFrame({"run": ["r", "r", "r", "r", "r", "q"], "step": [1000, 1000, 2000, 2000, 2000, 200],
                         "layer": ["layer2", "layer3", "layer2", "layer3", "layer2", "layer2"],
                         "key": ["l2_rel_per_move"] * 4 + ["cos", "l2_rel_per_move"],
                         "value": [1.0, 3.0, 5.0, 7.0, 0.9, 4.0]})
    # r: step 1000 -> loss 1.5 (the record at 1000), mean (1 + 3) / 2; step 2000 -> loss 1.0 (at 1500), (5 + 7) / 2
    # q: its only probe (step 200) comes before its first loss (500): no record
    assert progress_records(metrics, grad) == {"r": [(1000, 1.5, 2.0), (2000, 1.0, 6.0)]}
    assert progress_records(metrics.iloc[:0], grad) == {}


def group(key, bn, lr):
    return ConfigGroup(key, {"bn.enabled": bn, "bn.noise": False, "lr": lr, "model.depth": 3})


def test_own_rate_networks_pair_only_when_lr_is_ignored():
    groups = [group("a", True, 7.2), group("b", False, 3.6)]
    assert comparison_sets(groups) == []  # different rates: no pair by default
    (s,) = comparison_sets(groups, ignored_keys({"own_rates": True}))
    assert s["BN"].key == "a" and s["no BN"].key == "b"
    assert pair_label(groups[1], groups, ("lr",)) == "" and pair_label(groups[1], groups) == "lr=3.6"
    assert ignored_keys(None) == () and ignored_keys({"own_rates": False}) == ()


def test_design_record_round_trip_and_report_fields(tmp_path):
    assert read_design(tmp_path) is None
    design = {"rates": {"BN": 7.2, "no BN": 3.6, "noisy BN": 7.2}, "tuning_seeds": [102, 100, 101],
              "evaluation_seeds": [4, 0, 1, 2, 3], "own_rates": True, "rate_source": "x", "tuning_dir": "t"}
    write_design(tmp_path / "sweep", design)
    assert read_design(tmp_path / "sweep") == design
    f = design_fields(design, [0, 1])
    assert f["tuning_seeds"] == [100, 101, 102] and f["evaluation_seeds"] == [0, 1, 2, 3, 4]
    assert design_fields(None, [1.0, 0.0, 1.0]) == {"ics_design": None, "tuning_seeds": [], "evaluation_seeds": [0, 1]}
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ics_design.json").write_text(json.dumps([1, 2]))
    assert read_design(tmp_path / "bad") is None


def test_every_measure_with_two_views_has_exactly_one_preregistered():
    by_claim = {}
    for s in SPECS:
        by_claim.setdefault(s.claim.name, []).append(s)
    for name, specs in by_claim.items():
        assert sum(s.preregistered for s in specs) == 1, name
    grad = {s.view: s for s in by_claim["BN reduces gradient ICS"]}
    land = {s.view: s for s in by_claim["BN smooths the landscape"]}
    assert grad["matched training progress"].preregistered and grad["matched training progress"].col == MATCHED
    assert not grad["same steps"].preregistered and grad["same steps"].col == "grad.l2_rel_per_move"
    assert land["raw"].preregistered and land["raw"].col == "land.beta_smoothness"
    assert not land["filter-normalized"].preregistered
    # the thresholds and directions of the first run are unchanged
    assert {s.claim.direction + str(s.claim.threshold) for s in [*grad.values(), *land.values()]} == {"<1.0"}


def row(view, pre):
    return {"name": "c", "quantity": "q", "direction": "<", "threshold": 1.0, "per_seed": {0: 0.5}, "bounds": {},
            "mean": 0.5, "std": None, "interval": None, "verdict": "inconclusive", "reason": "r", "view": view,
            "preregistered": pre}


def test_the_claims_table_marks_the_preregistered_view():
    from tests.test_claims import claims_cells

    cells = claims_cells([row("raw", True), row("filter-normalized", False)])
    assert [c["view"] for c in cells] == ["raw (pre-registered)", "filter-normalized"]
    assert list(cells[0])[:3] == ["claim", "view", "quantity"]
    old = {k: v for k, v in row("raw", True).items() if k not in ("view", "preregistered")}
    assert "view" not in claims_cells([old])[0]  # report.json files written before views render as before


def test_a_hand_edited_design_record_is_a_warning_and_the_report_uses_the_runs_seeds(tmp_path, caplog):
    """ics_design.json whose seeds are not a list of whole numbers (the report used to raise ValueError in
    design_fields): one warning naming the file and the key, and the runs' seeds; a design record that is not JSON
    is one warning and ignored."""
    from bnexp.report.build import build_report
    from test_report import make_ics_run

    for variant in ("BN", "noisy BN", "no BN"):
        for seed in (0, 1):
            make_ics_run(tmp_path, variant, 0.5, seed)
    (tmp_path / "ics_design.json").write_text(json.dumps({"tuning_seeds": "100-102", "evaluation_seeds": [0, "1"],
                                                          "own_rates": True}))
    data = build_report(tmp_path).data
    assert data["tuning_seeds"] == [] and data["evaluation_seeds"] == [0, 1]
    assert data["ics_design"] == {"own_rates": True}
    for key, value in (("tuning_seeds", '"100-102"'), ("evaluation_seeds", '[0, "1"]')):
        assert f"ics_design.json: key {key} is {value}, not a list of whole-number seeds; ignored" in caplog.text
    (tmp_path / "ics_design.json").write_text("{")
    caplog.clear()
    assert "ics_design" not in build_report(tmp_path).data and "ics_design.json is unreadable" in caplog.text
