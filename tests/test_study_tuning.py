"""Held-out tuning in the studies (docs/studies/PLAN.md, bnexp/report/study_tuning.py): each configuration's rate
is chosen on the tuning seeds 100-102 and only the evaluation seeds' runs at that rate are scored; synthetic run
folders with hand-computed choices and claims."""

from __future__ import annotations

import json

import pytest

from bnexp.report.claims import SUPPORTED
from bnexp.report.load import find_run_dirs, load_sweep
from bnexp.report.studies import MARKER
from bnexp.report.study_claims import study_section
from bnexp.report.study_tuning import Selection, choose, study_cells
from tests.test_studies import make_run

EVAL = (0, 1, 2, 3, 4)
TUNE = (100, 101, 102)


def normalizer_sweep(tmp_path):
    """BN and no BN on the grid {1.8, 3.6, 5.4}: on the tuning seeds no BN is fastest at 5.4 (2,000 steps) and
    BN at 3.6 (1,000); the evaluation seeds at those rates; decoys that must never be scored: no BN at 1.8 on
    the evaluation seeds (100 steps) and the tuning runs themselves."""
    tuning = {("none", 1.8): 4000, ("none", 3.6): 3000, ("none", 5.4): 2000,
              ("batch", 1.8): 1600, ("batch", 3.6): 1000, ("batch", 5.4): 1200}
    for (norm, lr), reach in tuning.items():
        for s in TUNE:
            make_run(tmp_path, f"{norm}_{lr}_{s}", seed=s, norm=norm, lr=lr, reach=reach, budget=8000)
    for i, s in enumerate(EVAL):
        make_run(tmp_path, f"none_5.4_{s}", seed=s, norm="none", lr=5.4, reach=[2000, 2200, 2400, 2000, 2200][i],
                 budget=8000)
        make_run(tmp_path, f"batch_3.6_{s}", seed=s, lr=3.6, reach=[1000, 1000, 1200, 1000, 1100][i], budget=8000)
        make_run(tmp_path, f"none_1.8_{s}", seed=s, norm="none", lr=1.8, reach=100, budget=8000)  # not chosen
    (tmp_path / MARKER).write_text(json.dumps({"study": "normalizer"}))
    return tmp_path


def test_the_choice_is_made_on_the_tuning_seeds_alone(tmp_path):
    sweep = load_sweep(find_run_dirs(normalizer_sweep(tmp_path)))
    c = study_cells("normalizer", sweep)
    chosen = choose(c, ("norm",), "steps")
    assert {k: v.rate for k, v in chosen.items()} == {("batch",): 3.6, ("none",): 5.4}
    assert [g["mean_steps"] for g in chosen[("none",)].grid] == [4000, 3000, 2000]
    sel = Selection(c, ("norm",))
    assert sel.held_out and sorted(sel.scored["seed"].unique()) == list(EVAL)
    rows, lr, _ = sel.rows(("none",))
    assert lr == 5.4 and sorted(rows["seed"]) == list(EVAL) and set(rows["lr"]) == {5.4}


def test_runs_on_tuning_seeds_and_unchosen_rates_never_enter_a_claim(tmp_path):
    sec = study_section(tmp_path, load_sweep(find_run_dirs(normalizer_sweep(tmp_path))))
    bn = sec["claims"][0]  # NM_BN: steps to 95%, no BN / BN
    # seed s: no BN at 5.4 / BN at 3.6 (the decoy no BN at 1.8, 100 steps, would give 0.1)
    assert bn["per_seed"] == pytest.approx({0: 2.0, 1: 2.2, 2: 2.0, 3: 2.0, 4: 2.0}) and bn["verdict"] == SUPPORTED
    assert sec["tuning_seeds"] == [100, 101, 102] and sec["evaluation_seeds"] == [0, 1, 2, 3, 4]
    assert {(t["family"], t["choice"]["rate"]) for t in sec["tuning"]} == {("BN", 3.6), ("no BN", 5.4)}
    assert sec["runs"] == 33  # every completed run trained: 18 tuning + 15 evaluation
    assert {r["lr"] for r in sec["table"] if r["norm"] == "none"} == {1.8, 5.4}
    assert all(s in EVAL for r in sec["table"] for s in r["per_seed"])
    assert "no BN: rate 5.4 (chosen on the tuning seeds; the highest rate of its grid, so a higher one might be better)." in sec["findings"]


def test_the_report_shows_the_tuning_grid(tmp_path):
    from bnexp.report.build import build_report
    from bnexp.report.cli import write_report

    write_report(build_report(normalizer_sweep(tmp_path)))
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["study"]["tuning_seeds"] == [100, 101, 102]
    md = (tmp_path / "report.md").read_text()
    assert "Tuning grid" in md and "**5.4: 0/3 failed, 2,000**" in md and "**3.6: 0/3 failed, 1,000**" in md


def test_an_incomplete_tuning_grid_chooses_nothing(tmp_path):
    normalizer_sweep(tmp_path)
    import shutil
    shutil.rmtree(tmp_path / "none_3.6_101")
    sel = Selection(study_cells("normalizer", load_sweep(find_run_dirs(tmp_path))), ("norm",))
    rows, lr, why = sel.rows(("none",))
    assert lr is None and rows.empty and "101 missing" in why
    assert sel.rows(("batch",))[1] == 3.6
