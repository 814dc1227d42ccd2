"""Selection bias, through the project's own rate selection (bnexp.analysis.study_runs.Selection, which chooses by
bnexp.analysis.tuning.choose_rates): a rate chosen on the tuning seeds (read on the validation split) and scored
on fresh evaluation seeds (read on the test set) is unbiased; a rate chosen on the seeds it is scored on is the
minimum of a noisy grid, biased low by a known amount (docs/mnist/PLAN.md, "Why a new plan").

Every rate has the same true steps to the target (the worst case for selection): per run, log-steps are
N(log 3000, 0.2^2), the seed's draw plus the split's own measurement noise. The known answer: the chosen rate's
mean over its own n seeds sits E[min of 6 N(0, 1)] sd / sqrt(n) = -1.267 x 0.2 / sqrt(n) below the truth in
log-steps (-0.113 at n = 5)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bnexp.analysis.study_runs import Selection
from bnexp.analysis.tuning import EVALUATION_SEEDS, TUNING_SEEDS, choose_rates, runs_from_table

RATES = (0.6, 1.2, 2.4, 3.6, 5.4, 7.2)
SD_SEED, SD_SPLIT = 0.18, 0.087  # sqrt(0.18^2 + 0.087^2) = 0.2 per run and split
TRUTH = np.log(3000)
E_MIN_6 = -1.267  # the expected minimum of six standard normals
REPS = 300


def _cells(rng) -> pd.DataFrame:
    """One sweep's completed runs as the selection reads them (bnexp.analysis.study_runs.cells columns): the
    tuning seeds' steps as read on the validation split, the evaluation seeds' on the test set, and each run's
    steps on the test set kept apart (``test_steps``) to show what a choice on test would do."""
    rows = []
    for lr in RATES:
        for s in (*TUNING_SEEDS, *EVALUATION_SEEDS):
            seed_draw = rng.normal(0, SD_SEED)
            val, test = TRUTH + seed_draw + rng.normal(0, SD_SPLIT, 2)
            rows.append({"seed": s, "lr": lr, "norm": "batch", "status": "finished", "budget": 30_000, "final": 0.98,
                         "steps": int(round(np.exp(val if s in TUNING_SEEDS else test))),
                         "test_steps": int(round(np.exp(test)))})
    return pd.DataFrame(rows)


def _log_mean(frame: pd.DataFrame, col: str = "steps") -> float:
    return float(np.log(frame[col].astype(float)).mean())


def test_choosing_on_tuning_seeds_and_scoring_fresh_seeds_is_unbiased_choosing_on_the_scored_seeds_is_not():
    rng = np.random.default_rng(7)
    held_out, on_test_tuning, on_scored = [], [], []
    for _ in range(REPS):
        c = _cells(rng)
        sel = Selection(c, ("norm",))
        rows, lr, _ = sel.rows(("batch",))
        assert sorted(rows["seed"]) == list(EVALUATION_SEEDS) and set(rows["lr"]) == {lr}  # fresh seeds only
        held_out.append(_log_mean(rows))
        # the same rule, chosen on the tuning seeds' test-set reads and scored on those same reads
        tuning = c[c["seed"].isin(TUNING_SEEDS)]
        (ch,) = choose_rates(runs_from_table(tuning, ("net",), steps="test_steps"), "steps", 30_000)
        on_test_tuning.append(_log_mean(tuning[tuning["lr"] == ch.rate], "test_steps"))
        # the rule run on the evaluation seeds themselves (what a selection that reads them would score)
        ev = c[c["seed"].isin(EVALUATION_SEEDS)]
        (ch,) = choose_rates(runs_from_table(ev, ("net",), steps="steps"), "steps", 30_000,
                             tuning_seeds=EVALUATION_SEEDS)
        on_scored.append(_log_mean(ev[ev["lr"] == ch.rate]))
    se = 0.2 / np.sqrt(len(EVALUATION_SEEDS) * REPS)  # the standard error of the held-out average
    assert abs(np.mean(held_out) - TRUTH) < 4 * se  # unbiased (4 standard errors: 0.021)
    # biased by the known amount (the rule minimises mean steps, not mean log-steps: a little less than the
    # minimum of the log means, within 0.03)
    assert np.mean(on_test_tuning) - TRUTH == pytest.approx(E_MIN_6 * 0.2 / np.sqrt(3), abs=0.03)
    assert np.mean(on_scored) - TRUTH == pytest.approx(E_MIN_6 * 0.2 / np.sqrt(5), abs=0.03)


def test_the_choice_refuses_a_grid_that_holds_evaluation_seeds():
    """choose_rates with the tuning seeds refuses an evaluation-seed run: a design cannot choose on the seeds it
    scores by accident."""
    c = _cells(np.random.default_rng(0))
    with pytest.raises(ValueError, match="is not a tuning seed"):
        choose_rates(runs_from_table(c, ("net",), steps="steps"), "steps", 30_000)
