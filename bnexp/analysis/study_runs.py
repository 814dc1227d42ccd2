"""Held-out tuning in the five studies (docs/studies/PLAN.md): which rate each configuration is scored at.

A study's sweep is *held out* when it holds completed runs on the tuning seeds
:data:`bnexp.analysis.tuning.TUNING_SEEDS` (stage 1 of ``scripts/study.sh``). Then, per configuration (a
*family*: the runs that share the study's :data:`FAMILY_KEYS` values and differ in ``lr``) and per
objective, the rate is chosen on the tuning runs alone (:func:`choose`), and only the runs on the evaluation seeds
(stage 2) at that rate are scored; a run on a tuning seed never enters a claim. Which seeds are the evaluation
seeds depends on the split the tuning runs read (docs/studies/PLAN.md, second amendment of 2026-11-29): tuning runs
on the validation split (``data.validation``; the summary's ``evaluated_on``) make the amended design, scored on
:data:`bnexp.analysis.tuning.FRESH_EVALUATION_SEEDS` (1000-1004) alone; tuning runs that read the test set are
the design before it, scored on every seed that is not a tuning seed (0-4). A sweep
without tuning-seed runs is the one-stage design of the pages' current results: each family at
:func:`bnexp.analysis.tuning.best_rate` on the scored seeds themselves.

The orchestrator's stage 2 (:mod:`bnexp.designs.studies`) calls :func:`choose` on the same runs, so a study
trains the rates its report scores: one rule.

Objectives (docs/studies/PLAN.md): "steps" (steps, or examples, to the study's target; a failed seed at
the budget) for claims about steps; "accuracy" (final test accuracy) for claims about final accuracy.
"""

from __future__ import annotations

import json
import logging
import math

import pandas as pd

from bnexp.analysis.rules import NORMALIZERS, optional
from bnexp.analysis.runs import is_number, native
from bnexp.runfolders.rundir import COMPLETE_STATUSES
from bnexp.analysis.tuning import (FRESH_EVALUATION_SEEDS, HELD_OUT, TUNING_SEEDS, RateChoice, best_rate, choose_rates,
                                   runs_from_table)

log = logging.getLogger("bnexp.report")

CELL_COLUMNS = ["run", "seed", "status", "norm", "ghost", "groups", "m", "lr", "momentum", "position", "act", "model",
                "depth", "budget", "final", "steps", "first_eval", "left_chance", "wall_time_s", "evaluated_on"]
TARGET = 0.95       # MNIST target of every MLP study (the paper's Fig. 1 net reaches it in 2-45k steps)
CNN_TARGET = 0.97   # the placement study's small CNN reaches 95% within a few hundred steps
# the cells' columns that make one configuration of each study (its runs differ in lr and seed only)
FAMILY_KEYS = {"batch_size": ("norm", "ghost", "m"), "inference_statistics": ("m",),
               "placement": ("model", "act", "position"), "normalizer": ("norm",), "depth": ("depth", "norm")}
# the objectives each study's claims use (docs/studies/PLAN.md), the first for its findings
OBJECTIVES = {"batch_size": ("steps", "accuracy"), "inference_statistics": ("accuracy",), "placement": ("steps",),
              "normalizer": ("steps",), "depth": ("steps", "accuracy")}


def cells(sweep, target: float, extra: dict[str, str] | None = None) -> pd.DataFrame:
    """The completed runs (finished or diverged, with a seed) of the per-run table of ``sweep``
    (:class:`bnexp.analysis.runs.Sweep`; its :func:`bnexp.analysis.runs.coordinates` and numbers, nothing read
    again), one row each: run (path), seed, status, norm (the normalizer code,
    :data:`bnexp.analysis.rules.NORMALIZERS`), ghost, groups, m (60 when unknown), lr, momentum, position, act,
    model, depth (hidden layers of an MLP), budget, final (final test accuracy, fraction), steps (to ``target``,
    None: not reached), first_eval (the step of the run's first evaluation after step 0), left_chance (the
    chance rule, :data:`bnexp.analysis.rules.CHANCE`), wall_time_s,
    evaluated_on (the split its evaluations read: the summary's "test" or "validation"; "test" without the field), the
    table's columns ``extra`` names ({table column: its name here}, e.g. inference.batch -> acc_batch), and
    final_test_accuracy (= final). A run whose lr is not a number (a hand edit) is left out with a warning
    naming it."""
    t, reach, rows = sweep.table, sweep.reach(target), []
    done = t[t["status"].isin(COMPLETE_STATUSES) & t["seed"].notna()]
    for rid, row in zip(done.index, done.to_dict("records")):
        lr = row["rate"]
        if not is_number(lr) and not (isinstance(lr, float) and math.isnan(lr)):
            log.warning("%s: key lr is %s, not a number; the run is left out of the study", row["path"],
                        json.dumps(lr, default=str))
            continue
        rows.append({
            "run": row["path"], "seed": int(row["seed"]), "status": row["status"], "norm": row["norm"],
            "ghost": row["ghost"], "groups": row["groups"], "m": optional(row["m"], int) or 60, "lr": float(lr),
            "momentum": row["momentum"], "position": row["position"], "act": row["nonlinearity"], "model": row["net"],
            "depth": row["depth"], "budget": row["budget"], "final": optional(row["final_test_accuracy"]),
            "steps": optional(reach.loc[rid, "steps"], int), "first_eval": optional(row["first_eval"]),
            "left_chance": bool(row["left_chance"]),
            "wall_time_s": row["wall_time_s"], "evaluated_on": _split(row.get("summary.evaluated_on")),
            **{name: row[col] for col, name in (extra or {}).items()}})
    out = pd.DataFrame(rows, columns=CELL_COLUMNS + [k for k in (extra or {}).values() if k not in CELL_COLUMNS])
    return out.assign(final_test_accuracy=out["final"])


def _split(value) -> str:
    """A run's ``evaluated_on`` (the summary's field; a run without it read the test set)."""
    return value if isinstance(value, str) and value else "test"


def select(frame: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows of ``frame`` whose columns equal ``where``'s values (floats compared with a 1e-9 tolerance;
    a value None matches missing values)."""
    mask = pd.Series(True, index=frame.index)
    for k, v in where.items():
        col = frame[k]
        if v is None:
            mask &= col.isna()
        elif isinstance(v, float):
            mask &= pd.to_numeric(col, errors="coerce").sub(v).abs() < 1e-9
        else:
            mask &= col == v
    return frame[mask]


def study_cells(name: str, sweep) -> pd.DataFrame:
    """The completed runs of study ``name``'s sweep (:func:`bnexp.report.study_section.cells`) with steps to the
    study's target: 95%, except the placement study's CNN runs, 97%."""
    if name != "placement":
        return cells(sweep, TARGET)
    mlp, cnn = cells(sweep, TARGET), cells(sweep, CNN_TARGET)
    return pd.concat([mlp[mlp["model"] != "cnn"], cnn[cnn["model"] == "cnn"]], ignore_index=True)


def family_label(keys, combo) -> str:
    """A family's name on the page (the tuning grid): "BN, m = 60", "ghost BN, g = 2, m = 60", "MLP, sigmoid,
    BN after g", "6 layers, no BN"."""
    words = {"norm": lambda v: NORMALIZERS.get(v, str(v)), "ghost": lambda v: f"g = {v}", "m": lambda v: f"m = {v}",
             "depth": lambda v: f"{v} layers", "model": lambda v: str(v).upper(), "act": str,
             "position": lambda v: f"BN {v} g"}
    return ", ".join(words[k](v) for k, v in zip(keys, combo) if v is not None)


def choose(c: pd.DataFrame, keys, objective: str) -> dict[tuple, RateChoice | str]:
    """Each family's rate chosen on its tuning-seed runs of ``c`` (cells), by
    :func:`bnexp.analysis.tuning.choose_rates` with the family's budget (its largest trainer.max_steps).

    Returns:
        {family (the ``keys`` values; None where missing): its :class:`RateChoice`, or a sentence saying why
        none was chosen (an incomplete tuning grid, a steps value outside the budget)}; families without
        tuning runs are absent.

    Raises:
        ValueError: an unknown objective (from choose_rates).
    """
    tuning = c[c["seed"].isin(TUNING_SEEDS)]
    out: dict[tuple, RateChoice | str] = {}
    if tuning.empty:
        return out
    for combo, fam in tuning.groupby(list(keys), dropna=False, sort=True):
        combo = tuple(native(v) for v in (combo if isinstance(combo, tuple) else (combo,)))
        network = tuple(f"{k}={v}" for k, v in zip(keys, combo) if v is not None)  # ("norm=batch", "m=60", ...)
        runs = runs_from_table(fam, network, steps="steps", accuracy="final")
        try:
            out[combo] = choose_rates(runs, objective, int(pd.to_numeric(fam["budget"]).max()),
                                      tuning_seeds=TUNING_SEEDS)[0]
        except ValueError as exc:
            if objective not in ("steps", "accuracy"):
                raise
            out[combo] = f"no rate chosen ({exc})"
    return out


class Selection:
    """Which runs of each family a study scores (see the module docstring).

    Attributes:
        c: the cells. keys: :data:`FAMILY_KEYS` of the study. held_out: whether ``c`` holds a run on a tuning
        seed (the two-stage design). validated: held out with tuning runs that read the validation split (the
        design of docs/studies/PLAN.md's second amendment: scored on :data:`FRESH_EVALUATION_SEEDS` alone).
        choices: {objective: :func:`choose`} (held out only).
    """

    def __init__(self, c: pd.DataFrame, keys, objectives=("steps",)):
        self.c, self.keys = c, tuple(keys)
        self.held_out = bool(not c.empty and c["seed"].isin(TUNING_SEEDS).any())
        tuning = c[c["seed"].isin(TUNING_SEEDS)] if self.held_out else c.iloc[0:0]
        self.validated = bool("evaluated_on" in c and (tuning["evaluated_on"] == "validation").any())
        self.choices = {o: choose(c, self.keys, o) for o in objectives} if self.held_out else {}

    @property
    def scored(self) -> pd.DataFrame:
        """The runs that may enter a claim: held out, the evaluation-seed runs (tuning on the validation split:
        those on :data:`FRESH_EVALUATION_SEEDS`; tuning on test, the design before the amendment: every seed but
        the tuning seeds); one stage, every run."""
        if not self.held_out:
            return self.c
        if self.validated:
            return self.c[self.c["seed"].isin(FRESH_EVALUATION_SEEDS)]
        return self.c[~self.c["seed"].isin(TUNING_SEEDS)]

    def rows(self, combo: tuple, objective: str = "steps") -> tuple[pd.DataFrame, float | None, str]:
        """(the family's scored runs at its rate, the rate, how it was picked) for the family ``combo``
        (values of :attr:`keys`). Held out: the evaluation-seed runs at the rate chosen for ``objective``
        (:data:`bnexp.analysis.tuning.HELD_OUT`; no rows and the reason when none was chosen); one stage:
        every run of the family at its :func:`bnexp.analysis.tuning.best_rate`."""
        where = dict(zip(self.keys, combo))
        if not self.held_out:
            family = select(self.c, **where)
            lr, rule = best_rate(family)
            return (family.iloc[0:0] if lr is None else select(family, lr=lr)), lr, rule
        choice = self.choices.get(objective, {}).get(tuple(combo))
        if not isinstance(choice, RateChoice):
            return self.c.iloc[0:0], None, choice or "no tuning runs"
        return select(self.scored, **where, lr=float(choice.rate)), float(choice.rate), HELD_OUT

    def record(self) -> dict:
        """report.json's held-out fields of the study section: {} in the one-stage design, else
        {"tuning_seeds", "evaluation_seeds" (sorted ints of the runs present), "tuning": [{"family"
        (:func:`family_label`), "objective", "choice" (:meth:`RateChoice.as_dict`, or None), "why"}]}."""
        if not self.held_out:
            return {}
        rows = [{"family": family_label(self.keys, combo), "objective": o,
                 "choice": ch.as_dict() if isinstance(ch, RateChoice) else None,
                 "why": None if isinstance(ch, RateChoice) else ch}
                for o, chosen in self.choices.items() for combo, ch in chosen.items()]
        return {"tuning_seeds": sorted({int(s) for s in self.c["seed"] if int(s) in TUNING_SEEDS}),
                "evaluation_seeds": sorted({int(s) for s in self.scored["seed"]}), "tuning": rows}
