"""The grid-edge rule wired into the held-out designs (docs/studies/PLAN.md and docs/mnist/PLAN.md, amendment item
1; bnexp.analysis.grid_edges): once the design's grids are complete on the tuning seeds, a choice at an edge adds
the next factor-2 rate beyond it on the tuning seeds, stage after stage, until the choice is interior, the rate
added fails on every tuning seed, or three were added; only then does stage 2 train the chosen rates. Synthetic
run folders whose steps to each target follow a hand-set curve, so every choice is known in advance."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from bnexp.analysis.grid_edges import RECORD, read_record  # noqa: E402
from bnexp.analysis.tuning import TUNING_SEEDS  # noqa: E402
from test_orchestrate import script  # noqa: E402,F401  (the fixture)

EVAL = (0, 1, 2, 3, 4)


# --- MNIST ---------------------------------------------------------------------------------------------------

def _mnist_run(sweep, block, lr, seed, best):
    """One MNIST run whose steps to 90/95/97% grow with the distance (in doublings) of ``lr`` from the
    network's ``best`` rate: 1,000 x (2, 4, 6) x (1 + d^2 / 8) steps, on the 250-step evaluation grid, not reached
    past the 30,000-step budget; on a tuning seed it read the validation split (``data.validation`` and the
    summary's ``evaluated_on`` as the trainer writes them), else the test set."""
    import yaml
    from test_report import make_run

    from bnexp.designs import mnist

    d = abs(math.log2(lr / best))
    knots = [(0, 0.1)] + [(int(1000 * k * (1 + d * d / 8)) // 250 * 250, a)
                          for k, a in ((2, 0.9), (4, 0.95), (6, 0.97))]
    run = make_run(sweep, mnist.run_name(block, lr, seed), bn=block.bn, lr=lr, seed=seed, knots=knots,
                   max_steps=30_000, every=250, targets=[0.9, 0.95, 0.97])
    tuning = seed in TUNING_SEEDS
    cfg = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    cfg["model"]["init"] = block.init
    cfg.setdefault("data", {})["validation"] = mnist.VALIDATION if tuning else 0
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    summary = json.loads((run / "summary.json").read_text())
    summary["evaluated_on"] = "validation" if tuning else "test"
    (run / "summary.json").write_text(json.dumps(summary))


def _materialize(sweep, blocks, seeds, best):
    from bnexp.designs import mnist

    for b in blocks:
        for lr in b.rates:
            for s in seeds:
                if not mnist.is_done(sweep, mnist.run_name(b, lr, s)):
                    _mnist_run(sweep, b, lr, s, best[b.bn])


@pytest.mark.slow  # writes ~40 run folders of 30,000 steps
def test_mnist_an_edge_choice_runs_the_next_rate_on_the_tuning_seeds_before_stage_2(tmp_path):
    """BN on {1, 2} is best at 8 (two doublings past the top): the rule adds 4, then 8, then 16 (8 is then
    interior) before stage 2 trains 8; no BN on {1, 2, 4} is best at 2 (interior): nothing added."""
    from bnexp.designs import mnist

    blocks = [mnist.Block(True, "normal", (1.0, 2.0), (1.0, 2.0)), mnist.Block(False, "normal", (1.0, 2.0, 4.0),
                                                                                (1.0, 4.0))]
    best = {True: 8.0, False: 2.0}
    sweep = tmp_path / "m"
    _materialize(sweep, blocks, TUNING_SEEDS, best)
    added = []
    for _ in range(5):
        msgs, todo, on = mnist.stage_blocks(sweep, blocks, TUNING_SEEDS, EVAL)
        if on != TUNING_SEEDS:
            break
        assert [b.name for b in todo] == ["BN, normal init"] and "grid-edge rule" in msgs[0]
        added += list(todo[0].rates)
        _materialize(sweep, todo, TUNING_SEEDS, best)
    assert added == [4.0, 8.0, 16.0]
    assert on == EVAL and [(b.name, b.rates) for b in todo] == [("BN, normal init", (8.0,)),
                                                                  ("no BN, normal init", (2.0,))]
    assert "  BN, normal init: 90% lr 8, 95% lr 8, 97% lr 8" in msgs
    record = mnist.edge_record(sweep, blocks, TUNING_SEEDS)
    assert {(e["network"], e["status"], e["chosen"]) for e in record} == {("BN, normal init", "interior", 8.0),
                                                                          ("no BN, normal init", "interior", 2.0)}


@pytest.mark.slow  # writes ~30 run folders of 30,000 steps
def test_mnist_the_rule_stops_after_three_added_rates_and_marks_the_choice(tmp_path):
    """BN best at 64 from {1, 2}: 4, 8, 16 are added, 16 is still the top edge: stage 2 trains 16, marked."""
    from bnexp.designs import mnist

    blocks = [mnist.Block(True, "normal", (1.0, 2.0), (1.0, 2.0))]
    sweep = tmp_path / "m"
    _materialize(sweep, blocks, TUNING_SEEDS, {True: 64.0})
    for _ in range(5):
        msgs, todo, on = mnist.stage_blocks(sweep, blocks, TUNING_SEEDS, EVAL)
        if on != TUNING_SEEDS:
            break
        _materialize(sweep, todo, TUNING_SEEDS, {True: 64.0})
    assert on == EVAL and todo[0].rates == (16.0,)
    assert "  BN, normal init: 90% lr 16 [edge (3 rates added beyond it)]" in msgs[1]
    assert {e["mark"] for e in mnist.edge_record(sweep, blocks, TUNING_SEEDS)} == {"edge (3 rates added beyond it)"}


def test_mnist_dry_run_prints_the_rule_and_the_rates_it_adds(tmp_path, monkeypatch):
    from bnexp.designs import mnist

    blocks = [mnist.Block(True, "normal", (1.0, 2.0), (1.0, 2.0))]
    monkeypatch.setattr(mnist, "BLOCKS", tuple(blocks))
    sweep = tmp_path / "m"
    _materialize(sweep, blocks, TUNING_SEEDS, {True: 8.0})
    st = mnist.stage_blocks(sweep, blocks, TUNING_SEEDS, EVAL)
    text, _ = mnist.plan_and_seconds(sweep, 2, [], evaluation_seeds=EVAL,
                                     stage=st)
    assert "grid-edge rule: a rate chosen at its grid's edge gets the next factor-2 rate" in text
    assert "  BN, normal init: 3 runs on the tuning seeds, 3 to run" in text
    assert "bn=true,init=normal,lr=4.0,seed=100" in text


def _seeds_in(obj) -> set[int]:
    """Every seed a committed report.json names: the ints under a key "seed", or in a list under "seeds",
    "tuning_seeds" or "evaluation_seeds", at any depth."""
    out: set[int] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "seed" and isinstance(v, int):
                out.add(v)
            elif k in ("seeds", "tuning_seeds", "evaluation_seeds") and isinstance(v, list):
                out |= {x for x in v if isinstance(x, int)}
            out |= _seeds_in(v)
    elif isinstance(obj, list):
        for v in obj:
            out |= _seeds_in(v)
    return out


def _earlier_seeds(repo) -> set[int]:
    """Every seed a committed report.json under docs/ names, except the reports of the amended design itself (its
    report.json's tuning_split is the validation split): the re-runs on the fresh seeds, which the seeds must be
    fresh from the sweeps before them, not from their own results (docs/studies/PLAN.md, second amendment: the
    MNIST reproduction's stage 2 uses the same seeds and shapes nothing in the studies)."""
    reports = (json.loads(f.read_text()) for f in sorted((repo / "docs").rglob("report.json")))
    return {s for r in reports if not str(r.get("tuning_split") or "").startswith("validation") for s in _seeds_in(r)}


def test_mnist_evaluation_seeds_are_fresh():
    """docs/mnist/PLAN.md, amendment: stage 2's seeds are 1000-1004, used by no committed sweep: disjoint from the
    tuning seeds, from the old evaluation and one-stage seeds (0-4, 1-3) and from every seed that a committed
    report.json under docs/ names (read here, so a sweep committed later on one of them fails this test; the
    re-run's own report aside: :func:`_earlier_seeds`)."""
    from conftest import REPO

    from bnexp.designs import mnist

    assert mnist.EVALUATION_SEEDS == (1000, 1001, 1002, 1003, 1004)
    committed = _earlier_seeds(REPO)
    assert {0, 1, 2, 3, 4, 100, 101, 102} <= committed  # the reader finds the old seeds it must avoid
    assert not set(mnist.EVALUATION_SEEDS) & (committed | set(range(5)) | set(TUNING_SEEDS))
    assert mnist.SEEDS == TUNING_SEEDS == (100, 101, 102)


def test_study_evaluation_seeds_are_fresh():
    """docs/studies/PLAN.md, second amendment: the studies' stage 2 runs on 1000-1004, disjoint from the tuning
    seeds, from the evaluation seeds 0-4 the earlier sweeps used and whose results shaped the grids, and from every
    seed a committed report.json under docs/ names; stage 2's batches and its estimate use them."""
    from conftest import REPO

    from bnexp.designs import studies

    assert studies.EVALUATION_SEEDS == (1000, 1001, 1002, 1003, 1004)
    committed = _earlier_seeds(REPO)
    assert {0, 1, 2, 3, 4, 100, 101, 102} <= committed  # the reader finds the old seeds it must avoid
    assert not set(studies.EVALUATION_SEEDS) & (committed | set(range(5)) | set(TUNING_SEEDS))
    study = studies.build_studies()["normalizer"]
    jobs = studies.expand(studies.Study(study.name, "", tuple(studies.evaluation_estimate_batches(study))))
    assert {int(dict(o.split("=", 1) for o in j.overrides)["seed"]) for j in jobs} == set(range(1000, 1005))


def _train_commands(out: str) -> list[list[str]]:
    from conftest import shell_words

    return [shell_words(line[2:]) for line in out.splitlines() if line.startswith("$ ") and " train " in line]


def _value(command: list[str], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in command if a.startswith(key + "=")), None)


@pytest.mark.slow  # composes every block's config and writes ~30 run folders of 30,000 steps
def test_mnist_stage_1_reads_the_validation_split_and_stage_2_the_test_set(script, tmp_path, monkeypatch):
    """docs/mnist/PLAN.md, amendment: every stage-1 block (the grids on the tuning seeds 100-102) trains with
    data.validation=10000, every stage-2 block (the chosen rates on the evaluation seeds 1000-1004) with
    data.validation=0; DRY_RUN says so; a tuning run in the sweep folder that read the test set is refused
    (one line, exit 2); report.json of the two stages names each stage's split and seeds."""
    from bnexp.designs import mnist
    from bnexp.report import build_report

    blocks = [mnist.Block(True, "normal", (1.0, 2.0, 4.0), (1.0, 4.0)),
              mnist.Block(False, "normal", (1.0, 2.0, 4.0), (1.0, 4.0))]
    monkeypatch.setattr(mnist, "BLOCKS", tuple(blocks))
    sweep = tmp_path / "m"
    # stage 1: the grids on the tuning seeds, every block on the validation split
    code, out, err, _ = script("mnist", SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert code == 0, err
    stage1 = _train_commands(out)
    assert len(stage1) == 2 and all(_value(c, "data.validation") == "10000" and _value(c, "seed") == "100,101,102"
                                    for c in stage1)
    assert "stage 1 (tuning seeds 100, 101, 102): every rate of every grid, read on the validation split " \
           "(data.validation=10000" in out
    assert "on the fresh seeds 1000, 1001, 1002, 1003, 1004, trained on the full training set and scored on the " \
           "test set (data.validation=0)" in out
    # a complete tuning run that read the test set (the one-stage design's) is not reused
    _mnist_run(sweep, blocks[0], 1.0, 100, 2.0)
    stale = sweep / mnist.run_name(blocks[0], 1.0, 100) / "summary.json"
    summary = json.loads(stale.read_text())
    stale.write_text(json.dumps({k: v for k, v in summary.items() if k != "evaluated_on"}))
    code, out, err, ran = script("mnist", SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert code == 2 and ran == [] and err.strip().splitlines() == [
        f"error: SWEEP_DIR={sweep}: 1 complete tuning run(s) read the test set, e.g. bn=true,init=normal,lr=1.0,"
        "seed=100 (the one-stage design's; docs/mnist/PLAN.md tunes on the validation split): move them aside or "
        "choose another SWEEP_DIR"]
    stale.write_text(json.dumps(summary))
    # stage 2: both choices interior (best 2), trained on the full training set and scored on test, seeds 1000-1004
    _materialize(sweep, blocks, TUNING_SEEDS, {True: 2.0, False: 2.0})
    code, out, err, _ = script("mnist", SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert code == 0, err
    stage2 = _train_commands(out)
    assert [(_value(c, "lr"), _value(c, "seed"), _value(c, "data.validation")) for c in stage2] == \
        [("2", "1000,1001,1002,1003,1004", "0")] * 2
    _materialize(sweep, [mnist.replace(b, rates=(2.0,)) for b in blocks], mnist.EVALUATION_SEEDS,
                 {True: 2.0, False: 2.0})
    data = build_report(sweep).data
    assert (data["tuning_seeds"], data["evaluation_seeds"]) == ([100, 101, 102], [1000, 1001, 1002, 1003, 1004])
    assert data["evaluated_on"] == {"tuning": ["validation"], "evaluation": ["test"]}
    assert (data["tuning_split"], data["evaluation_split"]) == ("validation (10,000 held-out training images)", "test")
    rows = data["best_rate_speedups"]
    assert rows and all(r["evaluated_on"] == ["test"] for r in rows)


# --- the studies ------------------------------------------------------------------------------------------------

def _study_runs(sweep, study, jobs, best):
    """Each job's run folder for the normalizer study: steps to 95% = 1,000 x (1 + d^2 / 8) (d: doublings from the
    normalizer's best rate), on the 200-step evaluation grid, never reached past 8,000; a tuning run read the
    validation split (docs/studies/PLAN.md, second amendment), any other the test set."""
    from test_studies import make_run

    norm = {"'true'": "batch", "'false'": "none", "layer": "layer", "group": "group"}
    from bnexp.designs.studies import is_done
    for j in jobs:
        if is_done(sweep, j):
            continue
        ov = dict(o.split("=", 1) for o in j.overrides)
        n = norm[ov.get("bn", "group")]
        lr = float(ov["lr"])
        d = abs(math.log2(lr / best[n]))
        steps = int(round(1000 * (1 + d * d / 8) / 200)) * 200
        make_run(sweep, j.folder, seed=int(ov["seed"]), norm=n, lr=lr, budget=8000, every=200,
                 reach=steps if steps <= 8000 else None, final=0.97 if steps <= 8000 else 0.9,
                 validation=10_000 if int(ov["seed"]) in TUNING_SEEDS else 0)


@pytest.mark.slow  # writes ~140 run folders
def test_a_study_extends_an_edge_choice_before_stage_2_and_the_report_reads_the_same_choice(tmp_path):
    """The normalizer study (grid 0.9 ... 21.6): GroupNorm is best at 0.45, one halving below the grid, so the
    rule adds 0.45 and 0.225 (0.45 is then interior); the others are best inside. Stage 2 trains GroupNorm at
    0.45, and the report, on the same runs, chooses 0.45 and shows no edge mark."""
    from bnexp.designs import studies as studies_design
    from bnexp.designs.studies import Study, build_studies, expand, stage_two
    from bnexp.analysis.runs import find_run_dirs, load_sweep
    from bnexp.report.study_section import MARKER
    from bnexp.report.study_claims import study_section

    study = build_studies()["normalizer"]
    best = {"batch": 2.4, "none": 5.4, "layer": 3.6, "group": 0.45}
    _study_runs(tmp_path, study, expand(study), best)
    added = []
    for _ in range(5):
        st = stage_two(study, tmp_path)
        if not st.extending:
            break
        assert len(st.batches) == 1 and "GroupNorm" in st.batches[0].label and "grid-edge rule" in st.batches[0].label
        jobs = expand(Study("normalizer", "", tuple(st.batches)))
        assert {int(dict(o.split("=", 1) for o in j.overrides)["seed"]) for j in jobs} == set(TUNING_SEEDS)
        added.append(sorted({j.folder.split("lr=")[1].split(",")[0] for j in jobs}))
        _study_runs(tmp_path, study, jobs, best)
    assert added == [["0.45"], ["0.225"]]
    rates = {j.folder for j in expand(Study("normalizer", "", tuple(st.batches)))}
    first = studies_design.EVALUATION_SEEDS[0]  # stage 2 scores the design's fresh evaluation seeds
    assert f"bn=group,groups=4/lr=0.45,seed={first}" in rates and len(rates) == 20
    assert {(e["network"], e["status"]) for e in st.record} >= {("GroupNorm", "interior"), ("BN", "interior")}
    (tmp_path / MARKER).write_text(json.dumps({"study": "normalizer"}))
    (tmp_path / RECORD).write_text(json.dumps({"entries": st.record}))
    sec = study_section(tmp_path, load_sweep(find_run_dirs(tmp_path)))
    tuning = {t["family"]: t for t in sec["tuning"]}
    assert tuning["GroupNorm"]["choice"]["rate"] == 0.45 and tuning["GroupNorm"]["mark"] is None
    assert read_record(tmp_path) == st.record


@pytest.mark.slow  # writes ~150 run folders
@pytest.mark.parametrize("best, chosen, added, mark", [
    (0.05, 0.1125, 3, "edge (3 rates added beyond it)"),  # still improving after three halvings
    (0.0001, 0.45, 1, "edge (the next rate beyond it failed on every tuning seed)")])  # no rate ever reaches 95%
def test_a_study_choice_still_at_an_edge_when_the_rule_stops_is_marked(tmp_path, best, chosen, added, mark):
    from bnexp.designs.studies import Study, build_studies, expand, stage_two
    from bnexp.analysis.grid_edges import mark_of
    from bnexp.report.fmt import edge_mark

    study = build_studies()["normalizer"]
    rates = {"batch": 2.4, "none": 5.4, "layer": 3.6, "group": best}
    _study_runs(tmp_path, study, expand(study), rates)
    for _ in range(6):
        st = stage_two(study, tmp_path)
        if not st.extending:
            break
        _study_runs(tmp_path, study, expand(Study("normalizer", "", tuple(st.batches))), rates)
    (entry,) = [e for e in st.record if e["network"] == "GroupNorm"]
    assert entry["chosen"] == pytest.approx(chosen) and entry["added"] == added and entry["mark"] == mark
    choice = {"rate": entry["chosen"], "grid": [{"rate": r} for r in entry["rates"]]}
    assert edge_mark(mark_of(choice, st.record)) == mark and mark_of(choice, []) == "no_record"


@pytest.mark.slow  # plans real sweep folders through the orchestrator (Hydra's grammar, every block's config)
def test_dry_run_prints_the_rule_before_any_run_and_the_added_rates_once_the_grids_are_complete(script, tmp_path):
    """scripts/study.sh's DRY_RUN: on an empty folder the rule's sentence; once the normalizer grids are complete
    with GroupNorm best below them, the block of added rates on the tuning seeds and exactly its command."""
    from bnexp.designs.studies import build_studies, expand

    code, out, err, ran = script("study", "normalizer", SWEEP_DIR=str(tmp_path / "s"), DRY_RUN="1")
    assert code == 0 and ran == [] and "stage 1's grid-edge rule: a rate chosen at its grid's edge" in out, err
    study = build_studies()["normalizer"]
    _study_runs(tmp_path / "s", study, expand(study), {"batch": 2.4, "none": 5.4, "layer": 3.6, "group": 0.45})
    code, out, err, ran = script("study", "normalizer", SWEEP_DIR=str(tmp_path / "s"), DRY_RUN="1")
    assert code == 0 and "GroupNorm (4 groups) x rate: lr 0.45 added on the tuning seeds" in out, err
    printed = [line for line in out.splitlines() if line.startswith("$ ")]
    assert len(printed) == 1 and "lr=0.45" in printed[0] and "seed=100,101,102" in printed[0]


@pytest.mark.slow  # plans real sweep folders through the orchestrator (Hydra's grammar, every block's config)
def test_study_stage_1_reads_the_validation_split_stage_2_the_test_set_and_old_tuning_runs_are_refused(script,
                                                                                                      tmp_path):
    """docs/studies/PLAN.md, second amendment, through scripts/study.sh's orchestrator: every stage-1 command trains
    with data.validation=10000 on the tuning seeds; a complete tuning run in the folder that read the test set (its
    summary without evaluated_on, as the design before the amendment wrote it) is refused, one line, exit code 2,
    nothing run; a one-stage call (a seed override) is not; once the grids are complete on the validation split,
    stage 2's commands train the chosen rates on 1000-1004 with data.validation=0."""
    from test_studies import make_run

    from bnexp.designs.studies import build_studies, expand

    sweep = tmp_path / "s"
    code, out, err, ran = script("study", "placement", SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert code == 0 and ran == [], err
    stage1 = _train_commands(out)
    assert len(stage1) == 4 and all(_value(c, "data.validation") == "10000" and _value(c, "seed") == "100,101,102"
                                    for c in stage1)
    study = build_studies()["placement"]
    first = expand(study)[0]
    make_run(sweep, first.folder, seed=100, lr=0.15, budget=4000, every=200, reach=2000)  # no evaluated_on: test
    code, out, err, ran = script("study", "placement", SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert code == 2 and ran == [] and out == "" and err.strip().splitlines() == [
        f"error: SWEEP_DIR={sweep}: 1 complete tuning run(s) read the test set, e.g. {first.folder} (the design "
        "before docs/studies/PLAN.md's second amendment, which tunes on the validation split): move them aside or "
        "choose another SWEEP_DIR"]
    code, out, err, ran = script("study", "placement", "seed=100", SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert code == 0, err  # one stage: the seeds given are scored, on test, as before
    assert all(_value(c, "data.validation") is None for c in _train_commands(out)) and _train_commands(out)
    import shutil

    shutil.rmtree(sweep / first.folder)
    norm = {"before": 0.6, "after": 0.6}
    for j in expand(study):
        ov = dict(o.split("=", 1) for o in j.overrides)
        lr = float(ov["lr"])
        model = "cnn" if "model=cnn" in study.batches[j.batch].overrides else "mlp"
        best = 0.08 if model == "cnn" else norm[ov["bn.position"]]
        make_run(sweep, j.folder, seed=int(ov["seed"]), lr=lr, model=model, position=ov["bn.position"],
                 act=ov["act"], budget=1500 if model == "cnn" else 4000, every=150 if model == "cnn" else 200,
                 reach=600 if abs(lr - best) < 1e-9 else 1200, final=0.98, validation=10_000)
    code, out, err, ran = script("study", "placement", SWEEP_DIR=str(sweep), DRY_RUN="1")
    assert code == 0, err
    stage2 = _train_commands(out)
    assert len(stage2) == 8 and all(_value(c, "seed") == "1000,1001,1002,1003,1004"
                                    and _value(c, "data.validation") == "0" for c in stage2), out
    assert {_value(c, "lr") for c in stage2} == {"0.6", "0.08"}
