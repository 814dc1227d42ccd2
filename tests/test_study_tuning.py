"""Held-out tuning in the studies (docs/studies/PLAN.md, bnexp/analysis/study_runs.py): each configuration's rate
is chosen on the tuning seeds 100-102 and only the evaluation seeds' runs at that rate are scored; synthetic run
folders with hand-computed choices and claims."""

from __future__ import annotations

import json

import pytest

from bnexp.report.claims import SUPPORTED
from bnexp.analysis.runs import find_run_dirs, load_sweep
from bnexp.report.study_section import MARKER
from bnexp.report.study_claims import study_section
from bnexp.analysis.study_runs import Selection, choose, study_cells
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
    from bnexp.report.command import write_report

    write_report(build_report(normalizer_sweep(tmp_path)))
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["study"]["tuning_seeds"] == [100, 101, 102]
    md = (tmp_path / "report.md").read_text()
    assert "Tuning grid" in md and "**5.4: 0/3 failed, 2,000**" in md and "**3.6: 0/3 failed, 1,000**" in md


def test_a_held_out_study_makes_no_per_setting_claims_that_would_mix_tuning_and_evaluation_seeds(tmp_path):
    """BN and no BN both ran at 1.8, 3.6 and 5.4 on the tuning seeds: the per-setting BN vs no-BN claims of an
    ordinary sweep would pair them there (seeds 100-102) and score them; a held-out study's claims are its study
    section's alone. The same runs without study.json are a held-out sweep of the best-rate design: its claims
    table scores the evaluation seeds alone, and no rate ran both networks on them, so it has no row."""
    from bnexp.report.build import build_report
    from bnexp.report.command import write_report

    sweep = normalizer_sweep(tmp_path)
    write_report(build_report(sweep))
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["claims"] == [] and data["study"]["claims"]
    assert "the per-setting BN vs no-BN claims of other sweeps are not made here" in (tmp_path / "report.md").read_text()
    # nor speedups at each network's best rate (they would pair the tuning split's runs with evaluation runs):
    # the page's Holm family is the study's claims alone
    assert data["best_rate_speedups"] == []
    assert data["multiplicity"]["claims"] == len(data["study"]["claims"])
    (sweep / MARKER).unlink()
    plain = build_report(sweep).data
    assert plain["tuning_seeds"] == list(TUNE) and plain["claims"] == []


def test_an_incomplete_tuning_grid_chooses_nothing(tmp_path):
    normalizer_sweep(tmp_path)
    import shutil
    shutil.rmtree(tmp_path / "none_3.6_101")
    sel = Selection(study_cells("normalizer", load_sweep(find_run_dirs(tmp_path))), ("norm",))
    rows, lr, why = sel.rows(("none",))
    assert lr is None and rows.empty and "101 missing" in why
    assert sel.rows(("batch",))[1] == 3.6


@pytest.mark.slow  # draws the report's figures (~3 s of CPU)
def test_the_report_of_an_incomplete_tuning_grid_draws_the_study_figure(tmp_path, capsys):
    """A family whose tuning grid lacks a seed has no chosen rate (its tuning entry's choice is None): the report
    says so, the normalizer figure draws the other family's grid instead of failing with a traceback, and the
    seed advice names the missing tuning seed."""
    from bnexp.report import report_main

    normalizer_sweep(tmp_path)
    import shutil
    shutil.rmtree(tmp_path / "none_3.6_101")
    assert report_main([str(tmp_path)]) == 0
    assert (tmp_path / "study_normalizer.png").stat().st_size > 0
    tuning = json.loads((tmp_path / "report.json").read_text())["study"]["tuning"]
    assert [t["choice"] is None for t in tuning if t["family"] == "no BN"] == [True]
    assert "no BN: no rate chosen" in (tmp_path / "report.md").read_text()
    advice = json.loads((tmp_path / "report.json").read_text())["seed_advice"]
    assert "no BN lr=3.6 has 2 seeds (100, 102). Add seed=101:" in advice  # the tuning grid's own missing seed


def test_stage_2_trains_each_configuration_at_the_rate_its_report_chooses(tmp_path):
    """The normalizer study's tuning grid written where stage 1 puts it (no BN fastest at 5.4, BN at 1.2,
    LayerNorm at 3.6, GroupNorm at 1.8 on the tuning seeds, each inside its grid: tests/test_grid_edge_designs.py
    has the edge choices), read on the validation split: stage 2 trains each at the report's choice on the fresh
    seeds 1000-1004 on the full training set (data.validation=0), in folders named as stage 1 names them."""
    from bnexp.designs.studies import build_studies, evaluation_batches, expand, Study

    study = build_studies()["normalizer"]
    best = {"'true'": 1.2, "'false'": 5.4, "layer": 3.6, None: 1.8}
    norm = {"'true'": "batch", "'false'": "none", "layer": "layer", None: "group"}
    for j in expand(study):
        ov = dict(o.split("=", 1) for o in j.overrides)
        bn, lr = ov.get("bn") if ov.get("bn") != "group" else None, float(ov["lr"])
        make_run(tmp_path, j.folder, seed=int(ov["seed"]), norm=norm[bn], lr=lr, budget=8000, every=200,
                 reach=2000 if abs(lr - best[bn]) < 1e-9 else 4000, validation=10_000)
    msgs, batches = evaluation_batches(study, tmp_path)
    rates = {j.folder for j in expand(Study("normalizer", "", tuple(batches)))}  # 4 configurations x 5 seeds
    assert "bn=false,lr=5.4,seed=1000" in rates and "bn=true,lr=1.2,seed=1004" in rates
    assert "bn=layer,lr=3.6,seed=1002" in rates and "bn=group,groups=4/lr=1.8,seed=1003" in rates
    assert len(rates) == 20
    assert all([o for o in b.all_overrides() if o.startswith("data.validation=")] == ["data.validation=0"]
               for b in batches)
    # each message names its configuration by its block and its keys (e.g. a depth study's "12 hidden layers: ...")
    assert any(m.startswith(f"  {study.batches[0].label}: bn=layer: steps lr 3.6") for m in msgs), msgs
    # the report's choice on the same runs
    (tmp_path / MARKER).write_text(json.dumps({"study": "normalizer"}))
    sec = study_section(tmp_path, load_sweep(find_run_dirs(tmp_path)))
    assert {t["family"]: t["choice"]["rate"] for t in sec["tuning"]} == {"BN": 1.2, "no BN": 5.4, "LayerNorm": 3.6,
                                                                       "GroupNorm": 1.8}
    # incomplete tuning grid: no stage 2
    import shutil
    shutil.rmtree(tmp_path / "bn=layer,lr=3.6,seed=101")
    with pytest.raises(ValueError, match="1 tuning run"):
        evaluation_batches(study, tmp_path)


def test_normalizer_figure_draws_each_tuning_grid_and_marks_the_chosen_rate():
    """A held-out study section: one dashed tuning line per normalizer through its grid's mean steps, a star at
    the chosen rate, open markers where a tuning seed failed (counted at the budget)."""
    from bnexp.report.figures_studies import normalizer_figure

    def choice(rates, means, failed, chosen):
        return {"objective": "steps", "grid": [{"rate": r, "n": 3, "failed": f, "mean_steps": m, "chosen": r == chosen}
                                               for r, m, f in zip(rates, means, failed)]}

    sec = {"target": 0.95, "tuning": [
        {"family": "BN", "objective": "steps", "choice": choice([1.0, 2.0, 4.0], [900, 600, 700], [0, 0, 0], 2.0)},
        {"family": "no BN", "objective": "steps", "choice": choice([1.0, 2.0, 4.0], [3000, 2500, 8000], [0, 0, 3], 2.0)}],
        "table": [{"norm": "batch", "lr": 2.0, "seeds": 5, "reached": 5, "to_target": {"mean": 650}, "best": True,
                   "per_seed": {str(s): {"to_target": 600 + 25 * s} for s in range(5)}},
                  {"norm": "none", "lr": 2.0, "seeds": 5, "reached": 5, "to_target": {"mean": 2600}, "best": True,
                   "per_seed": {str(s): {"to_target": 2500 + 50 * s} for s in range(5)}}]}
    fig = normalizer_figure(sec)
    ax = fig.axes[0]
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert sorted(list(ln.get_ydata()) for ln in dashed) == [[900, 600, 700], [3000, 2500, 8000]]
    stars = [c for c in ax.collections if c.get_offsets().shape == (1, 2) and c.get_sizes()[0] == 150]
    assert sorted(tuple(c.get_offsets()[0]) for c in stars) == [(2.0, 600.0), (2.0, 2500.0)]
    assert "tuning grids" in fig._suptitle.get_text()


def test_the_accuracy_figure_of_a_held_out_study_shows_the_evaluated_configurations_with_short_labels(tmp_path):
    """The figure shows the configurations the evaluation seeds ran (no BN at 5.4, BN at 3.6, the decoy no BN at
    1.8), not the tuning-only rates; its legend names the keys that vary among them. A run-length key that follows
    another shown key one to one (max_steps = 240,000 / m) is left out; one that does not is kept."""
    from bnexp.report.build import build_report
    from bnexp.report.figures import chosen_groups, shown_labels
    from bnexp.report.groups import ConfigGroup

    report = build_report(normalizer_sweep(tmp_path))
    shown, note = chosen_groups(report)
    assert sorted((g.config.get("bn.enabled"), g.lr) for g in shown) == [(False, 1.8), (False, 5.4), (True, 3.6)]
    assert note == ("\nthe configurations the evaluation seeds ran (stage 2: each at its rate chosen on the tuning seeds); "
                    "evaluation seeds 0, 1, 2, 3, 4")
    assert len(report.groups) == 6  # + no BN at 3.6, BN at 1.8 and 5.4
    m = [ConfigGroup(f"k{i}", {"trainer.batch_size": b, "trainer.max_steps": 240_000 // b, "lr": lr})
         for i, (b, lr) in enumerate([(2, 0.15), (60, 7.2), (256, 3.6)])]
    assert list(shown_labels(m).values()) == ["trainer.batch_size=2 lr=0.15", "trainer.batch_size=60 lr=7.2",
                                              "trainer.batch_size=256 lr=3.6"]
    m[2].config["trainer.max_steps"] = 4000  # two m with one budget: max_steps no longer follows m
    assert "trainer.max_steps=4000" in shown_labels(m)["k2"]


# --- docs/studies/PLAN.md, second amendment: tuning on the validation split, evaluation on fresh seeds -----------

FRESH = (1000, 1001, 1002, 1003, 1004)


def _split_overrides(batch) -> list[str]:
    return [o for o in batch.all_overrides() if o.startswith("data.validation=")]


def test_each_stage_of_every_study_carries_its_split():
    """Stage 1's multiruns (and the grid-edge rule's added rates, on the tuning seeds) train with
    data.validation=10000; stage 2's (the chosen rates on the evaluation seeds) with data.validation=0; a one-stage
    study (a seed override) leaves the key to the config (0, test), as before; the user's extra overrides still
    come last and win."""
    from bnexp.designs.studies import STUDIES, build_studies, evaluation_batch, networks

    two, one = build_studies(), build_studies(two_stage=False)
    for name in STUDIES:
        for b in two[name].batches:
            assert _split_overrides(b) == ["data.validation=10000"] and "seed=100,101,102" in b.overrides
            assert b.all_overrides(("data.validation=5",))[-1] == "data.validation=5"
        assert all(_split_overrides(b) == [] for b in one[name].batches)
    study = two["normalizer"]
    (index, net), _ = next(iter(networks(study).items()))
    stage2 = evaluation_batch(study, index, net, [1.8], FRESH)
    added = evaluation_batch(study, index, net, [0.45], TUNE, evaluate=False)
    assert _split_overrides(stage2) == ["data.validation=0"] and "seed=1000,1001,1002,1003,1004" in stage2.overrides
    assert _split_overrides(added) == ["data.validation=10000"] and "seed=100,101,102" in added.overrides


def test_the_lines_command_gives_stage_1_the_validation_split_and_a_one_stage_call_none(tmp_path, capsys):
    from bnexp.designs.studies import main

    assert main(["lines", "depth", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert len([x for x in lines if x]) == 3 and all("data.validation=10000" in x.split() for x in lines if x)
    assert main(["lines", "depth", str(tmp_path), "seed=0"]) == 0
    assert "data.validation" not in capsys.readouterr().out


def validated_sweep(tmp_path):
    """The amended design's normalizer sweep: the tuning grid of :func:`normalizer_sweep` read on the validation
    split, BN at 3.6 and no BN at 5.4 on the fresh seeds 1000-1004 (test); decoys that must never be scored: the
    chosen rates on the old evaluation seeds 0-4 (no BN 100 steps: a ratio of 0.1) and no BN at 1.8 on 1000-1004."""
    tuning = {("none", 1.8): 4000, ("none", 3.6): 3000, ("none", 5.4): 2000,
              ("batch", 1.8): 1600, ("batch", 3.6): 1000, ("batch", 5.4): 1200}
    for (norm, lr), reach in tuning.items():
        for s in TUNE:
            make_run(tmp_path, f"{norm}_{lr}_{s}", seed=s, norm=norm, lr=lr, reach=reach, budget=8000,
                     validation=10_000)
    for i, s in enumerate(FRESH):
        make_run(tmp_path, f"none_5.4_{s}", seed=s, norm="none", lr=5.4, reach=[2000, 2200, 2400, 2000, 2200][i],
                 budget=8000, validation=0)
        make_run(tmp_path, f"batch_3.6_{s}", seed=s, lr=3.6, reach=[1000, 1000, 1200, 1000, 1100][i], budget=8000,
                 validation=0)
        make_run(tmp_path, f"none_1.8_{s}", seed=s, norm="none", lr=1.8, reach=100, budget=8000, validation=0)
    for s in EVAL:  # the chosen rates on the old seeds, read on the validation split: never scored
        make_run(tmp_path, f"none_5.4_{s}", seed=s, norm="none", lr=5.4, reach=100, budget=8000, validation=10_000)
        make_run(tmp_path, f"batch_3.6_{s}", seed=s, lr=3.6, reach=1000, budget=8000, validation=10_000)
    (tmp_path / MARKER).write_text(json.dumps({"study": "normalizer"}))
    return tmp_path


def test_a_study_tuned_on_the_validation_split_scores_only_the_fresh_seeds(tmp_path):
    sweep = load_sweep(find_run_dirs(validated_sweep(tmp_path)))
    sel = Selection(study_cells("normalizer", sweep), ("norm",))
    assert sel.held_out and sel.validated and sorted(sel.scored["seed"].unique()) == list(FRESH)
    rows, lr, _ = sel.rows(("none",))
    assert lr == 5.4 and sorted(rows["seed"]) == list(FRESH) and set(rows["lr"]) == {5.4}
    sec = study_section(tmp_path, sweep)
    bn = sec["claims"][0]  # NM_BN: steps to 95%, no BN / BN, seed s with seed s
    assert bn["per_seed"] == pytest.approx({1000: 2.0, 1001: 2.2, 1002: 2.0, 1003: 2.0, 1004: 2.0})
    assert bn["verdict"] == SUPPORTED
    assert sec["tuning_seeds"] == list(TUNE) and sec["evaluation_seeds"] == list(FRESH)
    assert all(s in FRESH for r in sec["table"] for s in r["per_seed"])


def test_report_json_of_a_study_tuned_on_the_validation_split_names_each_stages_split(tmp_path):
    """As the MNIST report does (tests/test_report_splits.py): report.json's tuning_split / evaluation_split and
    each claim's own split; the decoys on seeds 0-4 (read on the validation split) are not stage 2's."""
    from bnexp.report.build import build_report

    data = build_report(validated_sweep(tmp_path)).data
    assert data["evaluated_on"] == {"tuning": ["validation"], "evaluation": ["test"]}
    assert (data["tuning_split"], data["evaluation_split"]) == ("validation (10,000 held-out training images)", "test")
    assert data["study"]["claims"] and all(r["evaluated_on"] == ["test"] for r in data["study"]["claims"])
