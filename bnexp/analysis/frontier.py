"""Paper Sec. 4.2 on CIFAR-10 as a budget-accuracy frontier (design: docs/cifar/PLAN.md, plan version 2).

A preset's speed is the smallest training budget at which it reaches a given test accuracy, each run
annealing its rate over its own budget. Definitions (accuracies are fractions, budgets SGD steps):

* *runs table*: one row per (preset, budget_steps, seed) with its final_test_accuracy (full test set
  after the last step) and final_train_accuracy (the last evaluation's running training accuracy,
  over the mini-batches since the previous evaluation). A **diverged** run counts as chance
  accuracy (1 / :data:`bnexp.analysis.rules.NUM_CLASSES`) for both: the recipe at that budget produced a network that
  predicts nothing, and leaving it out would raise the frontier exactly where training failed.
  Unfinished runs (running, interrupted, failed) are left out with a warning (and a note in the report).
* *frontier* of a preset: seed-mean final test accuracy vs budget (each seed's frontier alike).
* *B(a)*: the budget at which a frontier first reaches accuracy ``a``, linearly interpolated in
  log2(budget) between the two ladder points around the first crossing; undefined (None) where the
  frontier never reaches ``a`` (never extrapolated); *censored* when ``a`` is already reached at the
  smallest budget (B(a) is then at most that budget).
* *S(a) = B_baseline(a) / B_preset(a)* over every ``a`` both frontiers reach; censored points are
  bounds (preset censored: S >= value; baseline censored: S <= value; both: left out).
* *decision seeds*: the seeds that ran every configuration of the baseline's tuning stage (:func:`decision_seeds`);
  every seed mean, a*, S(a*) and pass rule below is theirs. A run of another seed (PLAN.md's stage 5: seed 2 of the
  baseline and bn_x5) is *held out*: its S(a*_s) is reported beside the decision seeds' with the interval of S(a*)
  over every seed (:func:`held_out`), and decides nothing.
* *a\\**: the baseline's best seed-mean frontier accuracy; the headline is S(a*) on the seed-mean
  frontiers, ">= x" when a* is reached at the preset's smallest budget. Per seed s: seed s of the
  baseline with seed s of the preset, at that baseline seed's own best accuracy a*_s (a fixed a*
  would be out of reach of any baseline seed below the seed mean).
* *converged*: the baseline's last ladder doubling gains < :data:`GAIN` (0.5 points). Plan version 2's
  ladder doubles the baseline while a doubling gains >= 0.5 points, up to :data:`BASELINE_CAP` (192k steps on
  the CPU ladder); stopped at the cap still gaining, it is "not converged, reached the 192k cap" and S(a*) is
  measured at the cap's accuracy (:func:`bnexp.report.frontier_plan_v2.convergence` says which).
* *pass rules* (PLAN.md, plan version 2, before the results; :data:`CLAIMED`): S(a*) >= :data:`PASS_FACTOR`
  for ``bn_x5``; S(a*) > 1 for ``bn_baseline``; ``bn_x30`` above ``bn_x5`` at their largest common budget;
  ``bn_x5_sigmoid`` above chance + 5 points (:data:`bnexp.analysis.rules.CHANCE`) where ``baseline_sigmoid``
  stays at or below it; ``baseline_x5``'s ``pass`` is "does not train at 5x the rate", and its three outcomes
  (needs BN; the rate alone, within :data:`RATE_ALONE` x B_bn_x5(a*); not the rate alone) are
  :func:`bnexp.report.frontier_plan_v2.control_verdict`'s. A ``bn_x5`` or ``bn_baseline`` short of a* whose
  ladder would still climb (:func:`still_climbing`) is undecided, not failed: a sweep read before its ladders
  end gives no FAIL. The sweep's ladders (which runs exist) are
  :mod:`bnexp.designs.ladder`'s; this module only measures the runs that are there.

Entry points: :func:`frontier_section` (the loaded sweep, a sweep folder or a runs table -> report dict;
``bnexp report`` adds plan version 2's convergence, control, claims table, cost and ladder stops:
:func:`bnexp.report.frontier_plan_v2.plan_v2`),
:func:`frontier_markdown` (the section's markdown; ``bnexp report`` writes it into report.md).
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from bnexp.analysis.interval import seed_values
from bnexp.analysis.runs import Sweep, find_run_dirs, load_sweep, numeric
from bnexp.analysis.rules import CHANCE, Censored
from bnexp.analysis.tuning import best_rate
from bnexp.runfolders.rundir import COMPLETE_STATUSES

GAIN, PASS_FACTOR = 0.005, 5.0  # 0.5 points: a doubling that gains less is "converged"; the pass rule's 5x
# the baseline_x5 control (plan version 2): "the rate alone is BN-x5's speedup" when baseline_x5 reaches a* within
# RATE_ALONE x B_bn_x5(a*), i.e. S_baseline_x5(a*) >= S_bn_x5(a*) / RATE_ALONE (bnexp.designs.ladder's rule
# "decided" and bnexp.report.frontier_plan_v2.control_verdict both read it)
RATE_ALONE = 1.25
BASELINE_CAP = {"cpu": 192000, "gpu": 160000}  # the baseline ladder's largest budget per scale (plan version 2)
EARLY = 12000  # the CPU ladder's early budget: a net at chance through it does not train (PLAN.md, rule "chance")
TOL = 1e-9  # accuracy >= a - TOL counts as reached
BASELINE = "baseline"
PASS_WORDS = {True: "PASS", False: "FAIL", None: "UNDECIDED"}  # the pass rule's verdict from bn_x5's "pass"
COLUMNS = ["preset", "budget_steps", "seed", "final_test_accuracy", "final_train_accuracy"]
ORDER = ["baseline", "bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid", "baseline_sigmoid", "baseline_x5"]
# the CIFAR-10 ladder's preset sets (PRESETS=default|all of scripts/reproduce_cifar.sh, bnexp.designs.ladder), in the
# order in which the presets' ladders run (stage 4 follows this order after the headline)
PRESET_SETS = {"default": ("bn_x5", "bn_baseline"),
               "all": ("bn_x5", "bn_baseline", "baseline_x5", "baseline_sigmoid", "bn_x5_sigmoid", "bn_x30")}
# the presets whose "pass" decides a Sec. 4.2 claim (paper Table 2 / Sec. 4.2.2); a preset's claim in words is the
# report's (bnexp.report.frontier_text.frontier_words, templates/rules_and_bounds.md.j2: frontier_claim)
CLAIMED = ("bn_x5", "bn_baseline", "bn_x30", "bn_x5_sigmoid", "baseline_sigmoid", "baseline_x5")


# ----------------------------------------------------------------------------- loading


def runs_table(sweep: Sweep) -> pd.DataFrame:
    """The frontier's view of the per-run table of a sweep read once (:attr:`bnexp.analysis.runs.Sweep.table`):
    every run of an ``experiment`` preset with an integer budget (trainer.max_steps).

    Returns:
        DataFrame with :data:`COLUMNS` plus ``status``, ``lr``, ``base_lr``, ``dropout``, ``weight_decay``
        (from the run's config, NaN when absent), ``run_dir``, ``precision`` (the step loop's, fp32 or bf16, from
        summary.json; None when absent) and ``steps_per_s`` (summary.json's, NaN when absent); diverged runs at chance accuracy
        (1 / :data:`bnexp.analysis.rules.NUM_CLASSES`). Unfinished runs, and finished ones without a final test
        accuracy (NaN: a hand edit) or without a seed (seeds are what the per-seed frontiers pair; a missing one is
        never taken for seed 0), are left out with a warning.
    """
    t = sweep.table
    t = t[t["preset"].notna() & t["budget"].map(lambda v: isinstance(v, int) and not isinstance(v, bool))]
    for _, r in t[~t["status"].isin(COMPLETE_STATUSES)].iterrows():
        st = r.get("summary.status")
        warnings.warn(f"{r['path']}: status {st if isinstance(st, str) else None!r}, left out of the frontier "
                      "(re-run the sweep to complete it)")
    t = t[t["status"].isin(COMPLETE_STATUSES)]
    for path in t.loc[t["final_test_accuracy"].isna(), "path"]:  # a hand edit: no result, not a divergence
        warnings.warn(f"{path}: no final test accuracy (summary.json's final_test_accuracy and metrics.jsonl's last "
                      "test_accuracy are not numbers), left out of the frontier")
    for path in t.loc[t["seed"].isna() & t["final_test_accuracy"].notna(), "path"]:  # a seed is what is paired
        warnings.warn(f"{path}: no seed (summary.json's seed and the config's are missing or not numbers), left out "
                      "of the frontier")
    t = t[t["final_test_accuracy"].notna() & t["seed"].notna()]
    col = lambda k: numeric(t[k]).set_axis(t.index) if k in t else pd.Series(math.nan, index=t.index)  # noqa: E731
    return pd.DataFrame({  # a diverged run is at chance in the per-run table already
        "preset": t["preset"], "budget_steps": t["budget"].astype(int), "seed": t["seed"].astype(int),
        "final_test_accuracy": col("final_test_accuracy"),
        "final_train_accuracy": col("final_train_accuracy"), "status": t["status"],
        "lr": col("rate"), "base_lr": col("scale.base_lr"), "dropout": col("model.dropout"),
        "weight_decay": col("optim.weight_decay"), "run_dir": t["path"],
        "precision": t["summary.precision"] if "summary.precision" in t else pd.Series(None, index=t.index, dtype=object),
        "steps_per_s": col("summary.steps_per_s")}).reset_index(drop=True)


def load_runs(sweep_dir: str | Path) -> pd.DataFrame:
    """:func:`runs_table` of the run directories under ``sweep_dir`` (empty for a folder that does not exist)."""
    return runs_table(load_sweep(find_run_dirs(Path(sweep_dir)) if Path(sweep_dir).is_dir() else []))


def _config(df: pd.DataFrame) -> pd.Series:
    """A configuration label per row: rate, dropout, weight decay (a loaded sweep's columns)."""
    return df.apply(lambda r: f"lr={r.lr:g}, dropout={r.dropout:g}, weight decay={r.weight_decay:g}", axis=1)


def seeds_in_every(seed_sets) -> set[int]:
    """The seeds common to every set of ``seed_sets`` (the tuning stage's configurations: the seeds that ran all
    of them, docs/cifar/PLAN.md's decision seeds); empty when there is no set or no common seed."""
    sets = [{int(x) for x in s} for s in seed_sets]
    return set.intersection(*sets) if sets else set()


def tuning_table(runs: pd.DataFrame) -> dict | None:
    """The baseline's tuning stage: its configurations at the budget where most of them ran (>= 2), the winner
    chosen by the one-stage rate rule (:func:`bnexp.analysis.tuning.best_rate` without a target: the highest
    seed-mean final test accuracy, a diverged run at chance; ties to the smallest rate, then dropout, then weight
    decay).

    Returns:
        None without such a budget; else {"budget_steps", "rows": [{"lr", "dropout", "seeds",
        "mean_test_accuracy", "per_seed"}] by rate and dropout, "winner": the index of the chosen configuration,
        "config": the winner's label}.
    """
    base = runs[runs.preset == BASELINE]
    if base.empty or "lr" not in base:
        return None
    base = base.assign(config=_config(base))
    counts = base.groupby("budget_steps").config.nunique()
    if counts.max() < 2:
        return None
    budget = int(counts[counts == counts.max()].index.min())
    at = base[base.budget_steps == budget]
    # the decision seeds ran every configuration; a held-out seed (PLAN.md's stage 5: seed 2 ran the winner
    # alone) takes no part in the rows' means nor in the choice
    common = seeds_in_every(g.seed for _, g in at.groupby("config"))
    at = at[at.seed.isin(common)] if common else at
    rows = [{"lr": float(g.lr.iloc[0]), "dropout": float(g.dropout.iloc[0]), "config": cfg, "seeds": len(g),
             "mean_test_accuracy": float(g.final_test_accuracy.mean()),
             "per_seed": {str(int(k)): float(v) for k, v in zip(g.seed, g.final_test_accuracy)}}
            for cfg, g in at.groupby("config", sort=False)]
    rows.sort(key=lambda r: (r["lr"], r["dropout"]))
    chosen, _ = best_rate(at, steps=None, by=["lr", "dropout", "weight_decay"])
    win = [r["config"] for r in rows].index(_config(pd.DataFrame([chosen], columns=["lr", "dropout", "weight_decay"]))[0])
    return {"budget_steps": budget, "rows": rows, "winner": win, "config": rows[win]["config"]}


def decision_seeds(runs: pd.DataFrame, tuning: dict | None) -> list[int]:
    """The **decision seeds** (docs/cifar/PLAN.md, plan version 2: every ladder decision uses their seed means):
    the seeds that ran every configuration of the baseline's tuning stage (the ``per_seed`` keys of
    :func:`tuning_table`'s rows, intersected); without a tuning stage (or with no seed common to its rows), every
    seed of ``runs``. A run of another seed is **held out** (PLAN.md's stage 5, ``EXTRA_SEEDS``: seed 2 "decides
    nothing"): :func:`analyze` leaves it out of every seed mean, a*, S(a*) and pass rule, and reports its S(a*_s)
    beside the decision seeds'.

    Returns:
        the decision seeds, ascending (ints).
    """
    common = seeds_in_every(r["per_seed"] for r in (tuning or {}).get("rows") or [])
    return sorted(common) if common else sorted(int(s) for s in runs.seed.unique())


def select_frontier_runs(runs: pd.DataFrame, tuning: dict | None) -> pd.DataFrame:
    """One configuration per preset: the baseline's tuning winner (else its most frequent configuration),
    for every other preset its most frequent one (a warning when a preset has several)."""
    cfg = _config(runs)
    keep = pd.Series(False, index=runs.index)
    for preset, idx in runs.groupby("preset").groups.items():
        counts = cfg[idx].value_counts()
        chosen = tuning["config"] if preset == BASELINE and tuning else counts.index[0]
        if len(counts) > 1 and not (preset == BASELINE and tuning):
            warnings.warn(f"{preset}: {len(counts)} configurations in the sweep; the frontier uses {chosen!r}")
        keep[idx] = cfg[idx] == chosen
    out = runs[keep]
    dup = out.duplicated(["preset", "budget_steps", "seed"])
    if dup.any():
        warnings.warn(f"{int(dup.sum())} duplicate (preset, budget, seed) runs: the first of each is used")
    return out[~dup]


# ----------------------------------------------------------------------------- frontier arithmetic


def mean_frontier(runs: pd.DataFrame, preset: str, seed: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(budgets ascending, accuracies) of a preset's seed-mean frontier, or of one seed's."""
    sel = runs[(runs.preset == preset) & ((runs.seed == seed) if seed is not None else True)]
    f = sel.groupby("budget_steps").final_test_accuracy.mean().sort_index()
    return f.index.to_numpy(dtype=float), f.to_numpy(dtype=float)


def budget_to_reach(budgets, accs, a: float) -> tuple[float | None, bool]:
    """B(a): (budget, censored). Linear in log2(budget) between the ladder points around the first
    point at or above ``a``; (None, False) when never reached; (smallest budget, True) when the first
    point already reaches it (the true B(a) is then at most that budget)."""
    b, y = np.asarray(budgets, float), np.asarray(accs, float)
    hit = np.flatnonzero(y >= a - TOL)
    if hit.size == 0:
        return None, False
    i = int(hit[0])
    if i == 0:
        return float(b[0]), True
    t = (a - y[i - 1]) / (y[i] - y[i - 1])
    return float(2.0 ** (np.log2(b[i - 1]) + t * (np.log2(b[i]) - np.log2(b[i - 1])))), False


def speedup_at(base: tuple, pre: tuple, a: float) -> dict:
    """S(a) of two frontiers (budgets, accs): {"accuracy", "budget_baseline", "budget_preset", "speedup",
    "bound": "exact" | "lower" | "upper" | "unknown" | None}; speedup None where either never reaches ``a``."""
    bb, cb = budget_to_reach(*base, a)
    bp, cp = budget_to_reach(*pre, a)  # a censored B(a) is at most its value: an upper bound
    s = Censored(bb, "upper" if cb else "exact") / Censored(bp, "upper" if cp else "exact")
    return {"accuracy": a, "budget_baseline": bb, "budget_preset": bp, "speedup": s.value,
            "bound": None if s.value is None else s.bound}


def speedup_curve(base: tuple, pre: tuple, points: int = 101) -> list[dict]:
    """S(a) on ``points`` accuracies from the lower of the two frontiers' minima to the highest accuracy
    both reach; points where both B are censored (no information) are left out."""
    if not len(base[1]) or not len(pre[1]):
        return []
    lo, hi = min(base[1].min(), pre[1].min()), min(base[1].max(), pre[1].max())
    grid = np.linspace(lo, hi, points) if hi > lo else np.array([hi])
    return [p for p in (speedup_at(base, pre, float(a)) for a in grid) if p["bound"] not in (None, "unknown")]


def last_gain(accs) -> float | None:
    """Accuracy gained by the last step of a ladder (a doubling in scripts/reproduce_cifar.sh): the last
    point minus the one before it; None with fewer than two points."""
    return float(accs[-1] - accs[-2]) if len(accs) >= 2 else None


# ----------------------------------------------------------------------------- the section


def speedup_pass(preset: str, speedup: float | None, bound: str | None) -> bool | None:
    """The pass rule of ``bn_x5`` (S(a*) >= :data:`PASS_FACTOR`) or ``bn_baseline`` (S(a*) > 1) on one S(a*), a
    seed mean's or a seed's: False where the preset never reaches a* (no speedup); a bound decides only on its
    side (:meth:`bnexp.analysis.rules.Censored.above`: a lower bound below the threshold, an upper bound above it
    or bounds on both sides are None, undecided)."""
    if speedup is None:
        return False
    s = Censored(speedup, bound or "exact")
    return s.above(PASS_FACTOR - TOL) if preset == "bn_x5" else s.above(1.0, strict=True)


def trains(best: float, last_budget: int) -> bool | None:
    """Whether a preset trains (PLAN.md, ladder rules "trains" and "chance"): True once its best accuracy is above
    chance + 5 points (:data:`bnexp.analysis.rules.CHANCE`); False when it stays at or below that through
    :data:`EARLY` steps (``last_budget``: its ladder's largest budget); None while the ladder is short of it."""
    return True if best > CHANCE else (False if last_budget >= EARLY else None)


def does_not_train(best: float, last_budget: int) -> bool | None:
    """The claim "does not train" (baseline_sigmoid, baseline_x5): the negation of :func:`trains`, None alike."""
    t = trains(best, last_budget)
    return None if t is None else not t


def still_climbing(preset: dict, base_budget: int) -> bool:
    """Whether a preset that has not reached a* is still on its way (an unfinished ladder): its last doubling
    gained >= :data:`GAIN` (or it has one budget) and its largest budget is below the baseline's largest
    ``base_budget`` (steps), so plan version 2's ladder (rules a*, converged, cap) would run the next rung.
    ``preset``: :func:`analyze`'s per-preset dict ("budgets", "last_gain")."""
    gain = preset["last_gain"]
    return (gain is None or gain >= GAIN) and preset["budgets"][-1] < base_budget


def _claim_pass(preset: str, s: dict | None, presets: dict, x5_vs_x30: tuple | None) -> bool | None:
    def no(p):
        return does_not_train(presets[p]["best"], presets[p]["budgets"][-1])

    if preset in ("bn_x5", "bn_baseline", "bn_x30") and not (s and s["speedup"]) \
            and still_climbing(presets[preset], presets[BASELINE]["budgets"][-1]):
        return None  # not reached yet, and its ladder is not done: no verdict from an unfinished sweep
    if preset in ("bn_x5", "bn_baseline"):
        return speedup_pass(preset, s and s["speedup"], s and s["bound"])
    if preset == "bn_x30":  # at their largest common budget: bn_x30's ladder must have stopped to fix it
        return None if x5_vs_x30 is None else bool(x5_vs_x30[1] > x5_vs_x30[0])
    if preset == "bn_x5_sigmoid":  # trains where baseline_sigmoid does not: False if either side is False
        if "baseline_sigmoid" not in presets:
            return None
        both = (trains(presets[preset]["best"], presets[preset]["budgets"][-1]), no("baseline_sigmoid"))
        return False if False in both else (None if None in both else True)
    if preset in ("baseline_sigmoid", "baseline_x5"):
        return no(preset)
    return None


def analyze(runs: pd.DataFrame, tuning: dict | None = None) -> dict:
    """The frontier section of a runs table (:data:`COLUMNS`; one configuration per preset).

    Returns:
        {"frontier": rows with exactly :data:`COLUMNS`, "matched_accuracy": {preset (not the baseline):
        {"target_accuracy": a*, "baseline_converged": bool | None (None: one rung), "speedup": S(a*) or
        None (never reached), "speedup_is_lower_bound", "speedup_per_seed": {seed as str: S at a*_s or
        None}, "pass": bool | None (None: undecidable, e.g. a reference preset is missing)}},
        "frontier_analysis": targets, per-preset frontiers, S(a) curves, per-seed details, tuning, verdict}.
        Codes, never words: a preset's "claim" is the preset (one of :data:`CLAIMED`, else None) and a note is
        {"note": "seed_counts", "preset", "seeds"} or {"note": "baseline_censored"}; the report words them
        (:func:`bnexp.report.frontier_text.frontier_words`). Only the **decision seeds**' runs
        (:func:`decision_seeds`, from ``tuning``) enter any of these; with runs of other (held-out) seeds,
        :func:`held_out` adds their per-seed S(a*_s), the interval over every seed and the keys
        "decision_seeds", "held_out_seeds", "held_out_presets", "held_out_runs" of ``frontier_analysis``.

    Raises:
        ValueError: without baseline runs, or with a missing column.
    """
    missing = [c for c in COLUMNS if c not in runs]
    if missing:
        raise ValueError(f"the runs table lacks the column(s) {missing}")
    if not (runs.preset == BASELINE).any():
        raise ValueError("the runs table has no baseline runs: the frontier speedup needs them")
    rank = {p: i for i, p in enumerate(ORDER)}
    decide = decision_seeds(runs, tuning)
    held = runs[~runs.seed.isin(decide)]  # held-out seeds: every number below is the decision seeds'
    runs = runs[runs.seed.isin(decide)]
    if not (runs.preset == BASELINE).any():
        raise ValueError("the runs table has no baseline runs of the decision seeds: the frontier speedup needs them")
    runs = runs.sort_values(["preset", "budget_steps", "seed"], key=lambda c: c.map(rank).fillna(99)
                            if c.name == "preset" else c)
    names = list(dict.fromkeys(runs.preset))
    presets = {}
    for p in names:
        b, y = mean_frontier(runs, p)
        n = runs[runs.preset == p].groupby("budget_steps").seed.nunique().sort_index()
        presets[p] = {"budgets": [int(v) for v in b], "mean_test_accuracy": [float(v) for v in y],
                      "seeds": [int(v) for v in n], "best": float(y.max()), "last_gain": last_gain(y)}
    base = mean_frontier(runs, BASELINE)
    a_star = float(base[1].max())
    gain = presets[BASELINE]["last_gain"]
    converged = None if gain is None else bool(gain < GAIN)
    x5, x30 = presets.get("bn_x5"), presets.get("bn_x30")
    common = sorted(set(x5["budgets"]) & set(x30["budgets"])) if x5 and x30 else []
    x5_vs_x30 = None if not common else tuple(
        presets[p]["mean_test_accuracy"][presets[p]["budgets"].index(common[-1])] for p in ("bn_x5", "bn_x30"))
    seeds_b = sorted(runs[runs.preset == BASELINE].seed.unique())
    matched, details = {}, {}
    for p in names:
        if p == BASELINE:
            continue
        pre = mean_frontier(runs, p)
        head = speedup_at(base, pre, a_star)
        per_seed = []
        for s in sorted(set(seeds_b) & set(runs[runs.preset == p].seed.unique())):
            bs = mean_frontier(runs, BASELINE, s)
            one = speedup_at(bs, mean_frontier(runs, p, s), float(bs[1].max()))
            per_seed.append({"seed": int(s), **one})
        vals = [d["speedup"] for d in per_seed if d["speedup"] is not None]
        matched[p] = {"target_accuracy": a_star, "baseline_converged": converged, "speedup": head["speedup"],
                      "speedup_is_lower_bound": head["bound"] == "lower",
                      "speedup_per_seed": {str(d["seed"]): d["speedup"] for d in per_seed},
                      "pass": _claim_pass(p, head, presets, x5_vs_x30)}
        details[p] = {"headline": head, "per_seed": per_seed, "range": [min(vals), max(vals)] if vals else None,
                      "claim": p if p in CLAIMED else None, "curve": speedup_curve(base, pre)}
        if p == "bn_x30" and x5_vs_x30:
            details[p]["x5_vs_x30"] = {"budget_steps": common[-1], "bn_x5": x5_vs_x30[0], "bn_x30": x5_vs_x30[1]}
    b_star, cens = budget_to_reach(*base, a_star)
    notes: list = [{"note": "seed_counts", "preset": p, "seeds": v["seeds"]} for p, v in presets.items()
                   if len(set(v["seeds"])) > 1]
    if cens:  # no S(a*) is more than an upper bound
        notes.append({"note": "baseline_censored"})
    x5m = matched.get("bn_x5")
    verdict = "n/a" if x5m is None else PASS_WORDS[x5m["pass"]]
    climbing = [p for p in ("bn_x5", "bn_baseline") if p in matched and matched[p]["speedup"] is None
                and still_climbing(presets[p], presets[BASELINE]["budgets"][-1])]
    frontier = _rows(runs)
    fa = {"target_accuracy": a_star, "target_budget": b_star, "baseline_converged": converged,
          "baseline_last_gain": gain, "tuning": tuning, "presets": presets, "speedup": details,
          "pass_rule": {"verdict": verdict, "factor": PASS_FACTOR}, "climbing": climbing, "notes": notes}
    if not held.empty:
        fa.update(held_out(held, runs, matched, details, presets, notes))
    return {"frontier": frontier, "matched_accuracy": matched, "frontier_analysis": fa}


def _rows(runs: pd.DataFrame) -> list[dict]:
    """``runs`` (:data:`COLUMNS` at least) as report.json rows with exactly :data:`COLUMNS`."""
    return [{k: (int(r[k]) if k in ("budget_steps", "seed") else r[k]) for k in COLUMNS}
            for r in runs[COLUMNS].to_dict("records")]


def seed_speedup(d: dict, largest: float) -> Censored | None:
    """One seed's S(a*_s) (a :func:`speedup_at` dict ``d``) as it enters the interval over seeds: the ratio with its
    bound; where the preset never reached a*_s within its largest budget ``largest`` (steps) though the baseline
    did, at most B_baseline(a*_s) / ``largest`` (the preset needs more than ``largest`` steps, if it gets there at
    all): an upper bound, never a seed left out (leaving it out would favour the preset). None without a value."""
    if d["speedup"] is not None:
        return Censored(d["speedup"], d["bound"] or "exact")
    if d.get("budget_baseline") is None or d.get("budget_preset") is not None or not largest > 0:
        return None
    return Censored(d["budget_baseline"] / float(largest), "upper")


def held_out(held: pd.DataFrame, runs: pd.DataFrame, matched: dict, details: dict, presets: dict,
             notes: list) -> dict:
    """The held-out check (docs/cifar/PLAN.md, stage 5: seed 2 took no part in any choice): per preset and held-out
    seed s, S(a*_s) computed as the decision seeds' per-seed values are (seed s of the baseline vs seed s of the
    preset, at that baseline seed's own best accuracy a*_s), and the geometric mean of S(a*_s) over decision and
    held-out seeds with its 95% Student-t interval on the log values
    (:func:`bnexp.analysis.interval.seed_values`, the project's one interval; a bound opens its side, and a seed
    whose preset never reached a*_s counts as the upper bound of :func:`seed_speedup`).

    Args:
        held: the held-out runs (:data:`COLUMNS`); runs: the decision seeds' runs.
        matched, details, presets, notes: :func:`analyze`'s ``matched_accuracy``, ``frontier_analysis.speedup``,
            ``.presets`` and ``.notes``, completed in place: ``matched[p]["held_out_per_seed"]`` {seed as str: S or
            None} and ``matched[p]["interval"]`` (:meth:`~bnexp.analysis.interval.SeedInterval.as_dict`, for a preset
            with a held-out value and >= 2 values in all), ``details[p]["held_out_per_seed"]`` (as its "per_seed"),
            and a note {"note": "held_out_short", "preset", "seed", "budgets", "of"} for a held-out seed that ran
            fewer budgets than the decision seeds (unequal seed counts per budget, PLAN.md), and one {"note":
            "held_out_precision", "preset", "seed", "budgets", "precision", "decision_precision"} where its runs
            computed in another precision than the decision seeds' at the same budgets (with a ``precision``
            column: the ladder switches to bf16 after its check, so a held-out seed run later is bf16 throughout).

    Returns:
        {"decision_seeds", "held_out_seeds" (ints), "held_out_presets" (the presets with held-out runs, in the
        section's order), "held_out_runs" (rows with exactly :data:`COLUMNS`)}.
    """
    seeds = sorted(int(s) for s in held.seed.unique())
    by_preset = [p for p in presets if (held.preset == p).any()]
    for p in by_preset:
        for s in sorted(held[held.preset == p].seed.unique()):
            n = held[(held.preset == p) & (held.seed == s)].budget_steps.nunique()
            if n < len(presets[p]["budgets"]):
                notes.append({"note": "held_out_short", "preset": p, "seed": int(s), "budgets": int(n),
                              "of": len(presets[p]["budgets"])})
            if "precision" in held and "precision" in runs:  # the ladder's rungs switch precision (PLAN.md)
                mine = held[(held.preset == p) & (held.seed == s)].set_index("budget_steps").precision
                theirs = runs[runs.preset == p].groupby("budget_steps").precision.agg(lambda v: set(v.dropna()))
                differ = sorted(int(b) for b, x in mine.items() if x and b in theirs and theirs[b] and theirs[b] != {x})
                if differ:
                    notes.append({"note": "held_out_precision", "preset": p, "seed": int(s), "budgets": differ,
                                  "precision": str(mine[differ[0]]),
                                  "decision_precision": "/".join(sorted(theirs[differ[0]]))})
    base, both = held[held.preset == BASELINE], pd.concat([runs, held])
    largest = both.groupby(["preset", "seed"]).budget_steps.max()  # each preset's and seed's largest budget
    for p in matched:
        one = []
        for s in sorted(set(base.seed) & set(held[held.preset == p].seed)):
            bs = mean_frontier(held, BASELINE, s)
            one.append({"seed": int(s), **speedup_at(bs, mean_frontier(held, p, s), float(bs[1].max()))})
        if not one:
            continue
        matched[p]["held_out_per_seed"] = {str(d["seed"]): d["speedup"] for d in one}
        details[p]["held_out_per_seed"] = one
        values = {d["seed"]: v for d in details[p]["per_seed"] + one
                  if (v := seed_speedup(d, largest.get((p, d["seed"]), float("nan"))))}
        _, _, iv = seed_values(values, "log")
        if iv is not None and iv.n >= 2:
            matched[p]["interval"] = iv.as_dict()
            matched[p]["interval_seeds"] = sorted(values)
    decide = sorted(int(s) for s in runs.seed.unique())
    return {"decision_seeds": decide, "held_out_seeds": seeds, "held_out_presets": by_preset,
            "held_out_runs": _rows(held.sort_values(["preset", "budget_steps", "seed"]))}


def frontier_section(source) -> dict | None:
    """The frontier section of a sweep read once (a :class:`bnexp.analysis.runs.Sweep`), a sweep folder
    (``str``/``Path``) or a runs table (DataFrame).

    Returns:
        :func:`analyze`'s dict; None unless the sweep has baseline runs and some preset ran at two or
        more budgets (a single-budget sweep has no frontier).
    """
    with warnings.catch_warnings(record=True) as caught:  # shown only when the sweep has a frontier
        warnings.simplefilter("always")
        runs = (source if isinstance(source, pd.DataFrame) else runs_table(source) if isinstance(source, Sweep)
                else load_runs(source))
        tuning = tuning_table(runs) if "lr" in runs and not runs.empty else None  # a loaded sweep
        runs = select_frontier_runs(runs, tuning) if "lr" in runs and not runs.empty else runs
    if runs.empty or not (runs.preset == BASELINE).any() or runs.groupby("preset").budget_steps.nunique().max() < 2:
        return None
    sec = analyze(runs, tuning)
    for w in caught:
        warnings.warn(str(w.message))
        sec["frontier_analysis"]["notes"].append(str(w.message))
    return sec
