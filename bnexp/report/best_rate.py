"""The claims "BN trains in fewer steps", each network at its own best learning rate.

Comparing BN and no BN at one shared rate measures the rate choice as much as BN: a rate that suits BN may
cripple the plain network. Standard practice (Shallue et al. 2019, "Measuring the Effects of Data
Parallelism on Neural Network Training", Sec. 3) compares each configuration at its own best rate as well.
A *family* is the set of configurations that differ only in ``lr``; its best rate is
:func:`bnexp.analysis.tuning.best_rate` (one-stage design) or the rate chosen on the tuning seeds (:mod:`bnexp.analysis.tuning`). A best rate at
the lowest or highest rate of the grid may be beaten by one outside it (:func:`edge_of`); the report says so.

The claims (:func:`best_rate_speedups`, docs/mnist/README.md "Design") use the targets
:data:`bnexp.analysis.tuning.SPEEDUP_TARGETS` (90%, 95%, 97%, fixed before the run), each network at its own best rate *for
that target*, per seed the ratio no-BN steps / BN steps against :data:`SPEEDUP_THRESHOLD`, and the verdict
of :mod:`bnexp.report.claims`. The title's, claims' and reasons' words are templates/verdicts.md.j2's
(:func:`bnexp.report.claims.words`).
"""

from __future__ import annotations

import pandas as pd

from bnexp.report.claims import Claim, evaluate, words
from bnexp.report.groups import ConfigGroup, pair_label
from bnexp.analysis.runs import config_key, target_key
from bnexp.analysis.rules import Censored, normalizer_label, optional
from bnexp.report.fmt import censored_why
from bnexp.analysis.tuning import (HELD_OUT, SPEEDUP_TARGETS, TUNING_SEEDS, best_rate, choose_rates,
                                  runs_from_table)
from bnexp.runfolders.rundir import COMPLETE_STATUSES

SPEEDUP_THRESHOLD = 1.0
SPEEDUP_TITLE = words("speedup_title")


def init_of(config: dict) -> str:
    """The weight init of a configuration: ``model.init``; for configs without the key (older runs)
    "normal" when ``model.init_std`` is set, else "torch"; "unknown" without model keys."""
    if config.get("model.init"):
        return str(config["model.init"])
    if not any(k.startswith("model.") for k in config):
        return "unknown"
    return "normal" if config.get("model.init_std") is not None else "torch"


def edge_of(lr: float | None, grid: list[float]) -> str | None:
    """"lowest" or "highest" when ``lr`` is at that edge of a grid of several rates (a better rate may lie
    outside it), else None."""
    if lr is None or len(grid) < 2:
        return None
    return "lowest" if abs(lr - min(grid)) < 1e-12 else "highest" if abs(lr - max(grid)) < 1e-12 else None


def best_rate_for_target(family: list[ConfigGroup], table: pd.DataFrame, target: float) -> dict:
    """The rate of ``family`` (sorted by rate) used for the speedup at ``target``, and the runs it scores
    (docs/mnist/PLAN.md): **held out** when the family has runs on the tuning seeds
    :data:`bnexp.analysis.tuning.TUNING_SEEDS`, chosen on those alone (:func:`bnexp.analysis.tuning.choose_rates`,
    objective "steps", the family's budget) and scored on the other seeds; **one stage** otherwise,
    :func:`best_rate` on the family's completed runs, scored on the same seeds.

    Returns:
        {"lr" (None: no choice), "selection" (:data:`EVERY_SEED`, :data:`HIGHEST_FINAL` or :data:`HELD_OUT`),
        "edge" ("lowest" / "highest" rate of the grid, else None), "budget" (max_steps), "runs": {seed: run
        id}, "steps": {seed: steps to the target, None if not reached}, "first_eval": {seed: the step of its
        first evaluation after step 0}, "choice" (held out:
        :meth:`bnexp.analysis.tuning.RateChoice.as_dict`, else None), "why" (why there is no rate, else None)}.
    """
    col = f"steps_to_{target_key(target)}"
    rows = table[table["group"].isin([g.key for g in family]) & table["status"].isin(COMPLETE_STATUSES)]
    tuning = rows[rows["seed"].isin(TUNING_SEEDS)]
    choice, why = None, None
    if tuning.empty:
        lr, selection = best_rate(rows.assign(steps=rows[col]))
        scored = rows
    else:
        budget = max((int(g.max_steps) for g in family if g.max_steps is not None),  # else the runs' last steps
                     default=optional(pd.to_numeric(tuning["budget"], errors="coerce").max(), int))
        runs = runs_from_table(tuning, ("family",), steps=col)
        try:
            choice = choose_rates(runs, "steps", budget, tuning_seeds=sorted({int(s) for s in tuning["seed"]}))[0]
            lr, selection = choice.rate, HELD_OUT
        except ValueError as exc:
            lr, selection, why = None, None, words("no_rate", str(exc))
        scored = rows[~rows["seed"].isin(TUNING_SEEDS)]
    at = [g for g in family if lr is not None and abs(g.lr - lr) < 1e-12]  # tuning and evaluation runs of one
    group = at[-1] if at else None  # rate may differ in the split they read (data.validation): one rate, all
    if group is None:
        return {"lr": None, "selection": None, "edge": None, "budget": None, "steps": {}, "first_eval": {}, "runs": {},
                "choice": None, "why": why or words("no_rate", None)}
    mine = scored[scored["group"].isin([g.key for g in at])].dropna(subset=["seed"])
    return {"lr": group.lr, "selection": selection, "edge": edge_of(group.lr, sorted({g.lr for g in family})),
            "budget": group.max_steps, "runs": {int(r.seed): i for i, r in mine.iterrows()},
            "steps": {int(r.seed): optional(r[col], int) for _, r in mine.iterrows()},
            "first_eval": {int(r.seed): optional(r.get("first_eval")) for _, r in mine.iterrows()},
            "choice": choice.as_dict() if choice else None, "why": None}


def _speedup_row(bn: list[ConfigGroup], nb: list[ConfigGroup], groups: list[ConfigGroup], table: pd.DataFrame,
                 target: float) -> dict:
    """One row of :func:`best_rate_speedups`."""
    variant, init = normalizer_label(bn[0].config), init_of(bn[0].config)
    b, n = best_rate_for_target(bn, table, target), best_rate_for_target(nb, table, target)
    names = {}
    for side, family in (("bn", bn), ("no_bn", nb)):  # the normalizer and the keys that set the family apart
        others = [p for p in pair_label(family[0], groups).split() if not p.startswith("lr=")]
        names[side] = " ".join([normalizer_label(family[0].config) or family[0].label] + others)
    per_seed = {s: Censored.steps(n["steps"][s], n["budget"], first_eval=n["first_eval"].get(s))
                / Censored.steps(b["steps"][s], b["budget"], first_eval=b["first_eval"].get(s))
                if s in b["steps"] and s in n["steps"] else None for s in sorted(set(b["steps"]) | set(n["steps"]))}
    never = sorted({s for side in (b, n) for s, rid in side["runs"].items() if not table["left_chance"].get(rid)})
    missing = [(names[k], side["why"]) for k, side in (("bn", b), ("no_bn", n)) if side["lr"] is None]
    claim = Claim(words("speedup_claim", variant, target, init), words("speedup_quantity", variant, target), ">",
                  SPEEDUP_THRESHOLD)
    row = evaluate(claim, per_seed, never_learned=never, premise=words("no_rate_sides", missing) if missing else None,
                   scale="log")
    return row | {"target": target, "init": init, "variant": variant, "bn": names["bn"], "no_bn": names["no_bn"],
                  **{f"{k}_{f}": side[f] for f in ("lr", "selection", "edge", "steps", "budget", "choice")
                     for k, side in (("bn", b), ("no_bn", n))},  # bn_lr, no_bn_lr, bn_selection, ...
                  "lower_bound_seeds": sorted(s for s, k in row["bounds"].items() if k == "lower"),
                  "left_out": {s: words("missing_on_one_side") if v is None else censored_why(v)
                               for s, v in per_seed.items()
                               if row["per_seed"].get(s) is None}}


def best_rate_speedups(groups: list[ConfigGroup], table: pd.DataFrame, targets=SPEEDUP_TARGETS) -> list[dict]:
    """The claims "BN trains in fewer steps to T" for every target T of ``targets`` and every setting (weight
    init, ...) with a BN (or noisy BN) and a no-BN rate family (configurations that differ only in ``lr``, two
    rates or more): each network at its own best rate for T (:func:`best_rate_for_target`), per seed s the
    :class:`bnexp.analysis.rules.Censored` ratio no-BN / BN steps (a run that missed the target counts as its
    budget, a bound), judged by :func:`bnexp.report.claims.evaluate` on log ratios against
    :data:`SPEEDUP_THRESHOLD`.

    Returns:
        claims rows (report.json ``best_rate_speedups``), the paper's init first, then by init and target,
        each with the extra fields "target", "init", "variant", "bn", "no_bn", "bn_lr", "no_bn_lr",
        "bn_selection", "no_bn_selection", "bn_edge", "no_bn_edge", "bn_steps", "no_bn_steps" ({seed:
        steps or None}), "bn_budget", "no_bn_budget", "bn_choice", "no_bn_choice" (the held-out tuning
        grid, :meth:`bnexp.analysis.tuning.RateChoice.as_dict`, or None in the one-stage design),
        "lower_bound_seeds", "left_out" ({seed: reason}).
    """
    families: dict[str, list[ConfigGroup]] = {}
    for g in groups:
        if g.lr is not None and not g.key.startswith("summary:"):
            # the split a run reads (data.validation: tuning on held-out training images, evaluation on test;
            # docs/mnist/PLAN.md) is not part of the network: one family across it
            families.setdefault(config_key(g.config, ("lr", "data.validation")), []).append(g)
    settings: dict[str, dict[str, list[ConfigGroup]]] = {}
    for fam in (sorted(f, key=lambda g: g.lr) for f in families.values() if len({g.lr for g in f}) > 1):
        v = normalizer_label(fam[0].config)  # BN and noisy BN against no BN; other normalizers have no row
        if v in ("BN", "noisy BN", "no BN"):
            settings.setdefault(config_key(fam[0].config, ("lr", "bn", "experiment", "data.validation")), {})[v] = fam
    rows = [_speedup_row(setting[variant], setting["no BN"], groups, table, target) for target in targets
            for setting in settings.values() for variant in ("BN", "noisy BN")
            if variant in setting and "no BN" in setting]
    return sorted(rows, key=lambda r: (r["init"] != "normal", r["init"], r["variant"], r["target"]))


def held_out_seeds(rows: list[dict]) -> dict[str, list[int]]:
    """report.json's ``tuning_seeds`` and ``evaluation_seeds`` (sorted ints) of :func:`best_rate_speedups`
    rows chosen on tuning seeds (docs/mnist/PLAN.md); {} in the one-stage design."""
    chosen = [(r[f"{side}_choice"], r[f"{side}_steps"]) for r in rows for side in ("bn", "no_bn")
              if r.get(f"{side}_choice")]
    tuning = {s for choice, _ in chosen for s in choice.get("tuning_seeds", [])}
    if not tuning:
        return {}
    evaluation = {int(s) for _, steps in chosen for s in steps}
    return {"tuning_seeds": sorted(tuning), "evaluation_seeds": sorted(evaluation - tuning)}
