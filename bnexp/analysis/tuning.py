"""Held-out tuning: a design picks each network's rate on tuning seeds, then scores it on fresh seeds.

Picking each network's best rate on the same seeds whose results are then reported is optimistic: the
minimum of a noisy grid is biased low, and by more for the denser grid. So every design that picks a rate
(the MNIST best rate, each study, the ICS study's rate) runs in two stages (docs/mnist/PLAN.md):

1. **tuning**: every rate of a network's grid on the tuning seeds :data:`TUNING_SEEDS` (100, 101, 102);
2. **evaluation**: each network at its chosen rate on the evaluation seeds :data:`EVALUATION_SEEDS`
   (0-4; the re-runs of the MNIST reproduction and of the five studies, which tune on a validation split, use
   the fresh seeds :data:`FRESH_EVALUATION_SEEDS`, 1000-1004: docs/mnist/PLAN.md and docs/studies/PLAN.md,
   amendments), fresh runs never seen by the choice. Only these are scored (claims, intervals); report.json
   records both seed lists as ``tuning_seeds`` and ``evaluation_seeds``
   (:func:`bnexp.report.best_rate.held_out_seeds`, :mod:`bnexp.analysis.ics_design`, a study's study.json).

The rule (:func:`choose_rates`), fixed before any result, is :data:`STEPS_RULE` for objective ``"steps"``
(steps to a target accuracy; a failed seed, never reaching the target within the budget or diverging, counts
at the budget, and when every rate has a failed seed the choice is marked ``censored``) and
:data:`ACCURACY_RULE` for ``"accuracy"`` (final test accuracy). Ties go to the smallest rate, the safer one
(steps are resolved to the evaluation spacing, so ties happen).

A sweep without tuning-seed runs (the one-stage design of the pages' earlier results) scores each network at
:func:`best_rate`, chosen on the scored seeds themselves (:data:`EVERY_SEED`, else :data:`HIGHEST_FINAL`).

Pure functions on per-run results (:class:`TuningRun`, or per-run table rows); the report
(:mod:`bnexp.report.best_rate`, :mod:`bnexp.analysis.study_runs`) and the sweep orchestrator
(:mod:`bnexp.designs.orchestrate`) both choose by them, so a sweep trains the rate its report scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from bnexp.analysis.rules import CHANCE, optional

TUNING_SEEDS = (100, 101, 102)
EVALUATION_SEEDS = (0, 1, 2, 3, 4)
# stage 2's seeds of the designs that tune on the validation split (docs/mnist/PLAN.md and docs/studies/PLAN.md,
# amendments of 2026-11-29): fresh, used by no committed sweep (those used 0-4, 1-3 and 100-102)
FRESH_EVALUATION_SEEDS = (1000, 1001, 1002, 1003, 1004)
OBJECTIVES = ("steps", "accuracy")

STEPS_RULE = ("the rate with the fewest tuning seeds that failed (never reached the target within the budget, "
              "or diverged), then the fewest mean steps to the target over the tuning seeds (a failed seed at "
              "the budget), then the smallest rate")
ACCURACY_RULE = ("the rate with the fewest diverged tuning seeds, then the highest mean final test accuracy over "
                 "the tuning seeds, then the smallest rate")
SPEEDUP_TARGETS = (0.90, 0.95, 0.97)  # the MNIST design's targets (docs/mnist/PLAN.md): a rate is chosen per target
# how a scored rate was picked (report.json's "selection"): the one-stage rule's two cases (:func:`best_rate`),
# or on the tuning seeds (:func:`choose_rates`)
EVERY_SEED = "fewest steps"
HIGHEST_FINAL = "highest final accuracy"
HELD_OUT = "chosen on the tuning seeds"


@dataclass(frozen=True)
class TuningRun:
    """One tuning run's result.

    Attributes:
        network: the Hydra overrides that make the network, without ``lr`` and ``seed``, e.g.
            ("bn=true", "model.init=normal"): one network per distinct tuple.
        rate: the learning rate (``lr``).
        seed: the run's seed.
        steps: steps to the target (the first evaluation at or above it); None: not reached within the
            budget. Objective "steps" only.
        accuracy: final test accuracy as a fraction; objective "accuracy" only (None: missing).
        diverged: the run ended with status ``diverged``.
    """

    network: tuple[str, ...]
    rate: float
    seed: int
    steps: int | None = None
    accuracy: float | None = None
    diverged: bool = False


@dataclass(frozen=True)
class RateChoice:
    """One network's chosen rate and the tuning grid behind it.

    Attributes:
        network: the network's overrides (as :attr:`TuningRun.network`).
        rate: the chosen learning rate.
        objective: "steps" or "accuracy".
        rule: the rule, one sentence.
        tuning_seeds: the seeds the choice used, sorted.
        censored: objective "steps" and every rate had a failed tuning seed.
        grid: per rate, ascending: {"rate", "n", "failed" (steps: never reached the target or diverged;
            accuracy: diverged or ended at chance, final test accuracy <= :data:`bnexp.analysis.rules.CHANCE`, or
            no accuracy), "diverged" (accuracy), "mean_steps" (failed seeds at the budget) or "mean_accuracy"
            (None when no seed has one), "chosen"}.
    """

    network: tuple[str, ...]
    rate: float
    objective: str
    rule: str
    tuning_seeds: tuple[int, ...]
    censored: bool
    grid: tuple[dict, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict:
        """JSON-ready (report.json): lists instead of tuples."""
        return {"network": list(self.network), "rate": self.rate, "objective": self.objective, "rule": self.rule,
                "tuning_seeds": list(self.tuning_seeds), "censored": self.censored, "grid": [dict(g) for g in self.grid]}


def _grid_row(rate: float, runs: list[TuningRun], objective: str, budget: int | None) -> tuple[tuple, dict]:
    """(sort key: the smallest is chosen, grid row) of one rate's tuning runs."""
    if objective == "steps":
        steps = [budget if (r.diverged or r.steps is None) else r.steps for r in runs]
        failed = sum(r.diverged or r.steps is None for r in runs)
        mean = sum(steps) / len(steps)
        return (failed, mean, rate), {"rate": rate, "n": len(runs), "failed": failed, "mean_steps": mean}
    diverged = sum(r.diverged for r in runs)
    accs = [r.accuracy for r in runs if not r.diverged and r.accuracy is not None]
    mean = sum(accs) / len(accs) if accs else None
    failed = sum(r.diverged or r.accuracy is None or r.accuracy <= CHANCE for r in runs)
    return (diverged, -mean if mean is not None else math.inf, rate), {
        "rate": rate, "n": len(runs), "diverged": diverged, "mean_accuracy": mean, "failed": failed}


def runs_from_table(rows, network: tuple[str, ...], steps: str | None = None,
                    accuracy: str | None = None) -> list[TuningRun]:
    """:class:`TuningRun` of each row of a per-run table (pandas DataFrame with columns ``lr``, ``seed``,
    ``status`` and, when named, the ``steps`` column (steps to the target; NaN: not reached) and the
    ``accuracy`` column (final test accuracy, a fraction)); every run gets ``network``."""
    return [TuningRun(network=tuple(network), rate=float(r["lr"]), seed=int(r["seed"]),
                      steps=optional(r[steps], int) if steps else None,
                      accuracy=optional(r[accuracy]) if accuracy else None,
                      diverged=r["status"] == "diverged") for _, r in rows.iterrows()]


def choose_rates(runs: Iterable[TuningRun], objective: str = "steps", budget: int | None = None,
                 tuning_seeds: Sequence[int] = TUNING_SEEDS) -> list[RateChoice]:
    """Each network's rate by the module's rule, from a complete tuning grid.

    Args:
        runs: the tuning runs, every (network, rate) on every tuning seed.
        objective: "steps" (fewest steps to a target) or "accuracy" (highest final test accuracy).
        budget: the runs' step budget (``trainer.max_steps``): a failed seed's steps; needed for "steps".
        tuning_seeds: the seeds the tuning grid must hold (extra seeds are an error: a design that scores
            its evaluation seeds must not choose on them).

    Returns:
        one :class:`RateChoice` per network, in first-seen order.

    Raises:
        ValueError: an unknown objective; no budget for "steps"; no runs; a (network, rate) missing a
            tuning seed or run twice on one; a run on a seed outside ``tuning_seeds``; a non-finite or
            non-positive rate; a steps value that is negative or above the budget.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    if objective == "steps" and (budget is None or budget <= 0):
        raise ValueError("objective 'steps' needs the runs' step budget (trainer.max_steps) > 0")
    seeds = tuple(sorted(int(s) for s in tuning_seeds))
    cells: dict[tuple[str, ...], dict[float, dict[int, TuningRun]]] = {}
    for r in runs:
        if not (math.isfinite(r.rate) and r.rate > 0):
            raise ValueError(f"{' '.join(r.network)}: rate {r.rate!r} is not a positive number")
        if r.seed not in seeds:
            raise ValueError(f"{' '.join(r.network)} lr={r.rate:g}: seed {r.seed} is not a tuning seed "
                             f"({', '.join(map(str, seeds))})")
        if objective == "steps" and r.steps is not None and not 0 <= r.steps <= budget:
            raise ValueError(f"{' '.join(r.network)} lr={r.rate:g} seed={r.seed}: steps {r.steps} outside "
                             f"0..{budget}")
        cell = cells.setdefault(tuple(r.network), {}).setdefault(float(r.rate), {})
        if r.seed in cell:
            raise ValueError(f"{' '.join(r.network)} lr={r.rate:g}: seed {r.seed} appears twice")
        cell[r.seed] = r
    if not cells:
        raise ValueError("no tuning runs")
    choices = []
    for network, rates in cells.items():
        rows = []
        for rate in sorted(rates):
            missing = [s for s in seeds if s not in rates[rate]]
            if missing:
                raise ValueError(f"{' '.join(network)} lr={rate:g}: tuning seed(s) {', '.join(map(str, missing))} "
                                 f"missing (the tuning grid is not complete)")
            rows.append(_grid_row(rate, [rates[rate][s] for s in seeds], objective, budget))
        key, best = min(rows, key=lambda kr: kr[0])
        choices.append(RateChoice(network=network, rate=best["rate"], objective=objective,
                                  rule=STEPS_RULE if objective == "steps" else ACCURACY_RULE, tuning_seeds=seeds,
                                  censored=objective == "steps" and key[0] > 0,  # every rate had a failed seed
                                  grid=tuple({**row, "chosen": row is best} for _, row in rows)))
    return choices


def best_rate(rows, steps: str | None = "steps", by: str | list[str] = "lr") -> tuple[float | tuple | None, str]:
    """(best rate, rule) of one configuration's rate grid: ``rows`` are its completed runs (a DataFrame with
    columns ``lr``, ``status``, ``final_test_accuracy`` and ``steps``, NaN or None: not reached). The fewest mean steps to
    the target among the rates where every completed seed reached it and none diverged (a diverging rate is
    too high; :data:`EVERY_SEED`); when no rate qualifies, or without a target (``steps`` None), the highest mean
    final test accuracy (:data:`HIGHEST_FINAL`); ties go to the smallest rate; (None, "no runs") without rows.
    Shared by the MNIST speedups, the studies (docs/studies/README.md) and the CIFAR-10 baseline's tuning stage,
    which chooses a configuration (``by`` = its columns, e.g. ["lr", "dropout", "weight_decay"]; the choice is then
    the tuple of their values, ties to the smallest in that order) rather than a rate."""
    import pandas as pd  # here: the sweep scripts read this module's seeds without loading pandas

    if rows.empty:
        return None, "no runs"
    by_lr = list(rows.groupby(by, sort=True, dropna=isinstance(by, str)))  # a configuration may lack a dropout
    choice = (lambda key: float(key)) if isinstance(by, str) else (lambda key: tuple(map(float, key)))  # noqa: E731
    ok = [(pd.to_numeric(g[steps]).mean(), i) for i, (_, g) in enumerate(by_lr)
          if steps is not None and pd.to_numeric(g[steps]).notna().all() and (g["status"] != "diverged").all()]
    if ok:
        return choice(by_lr[min(ok)[1]][0]), EVERY_SEED
    finals = [(-m, i) for i, (_, g) in enumerate(by_lr)
              if not math.isnan(m := pd.to_numeric(g["final_test_accuracy"]).mean())]
    return (choice(by_lr[min(finals)[1]][0]), HIGHEST_FINAL) if finals else (None, "no runs")
