"""The claims "BN trains in fewer steps", each network at its own best learning rate.

Comparing BN and no BN at one shared rate measures the rate choice as much as BN: a rate that
suits BN may cripple the plain network. Standard practice (Shallue et al. 2019, "Measuring the
Effects of Data Parallelism on Neural Network Training", Sec. 3) compares each configuration at
its own best rate as well. Here a *family* is the set of configurations that differ only in
``lr``; its best rate is the grid rate with the fewest mean steps to the target over seeds,
among the rates where every completed seed reached it and none diverged (a diverging rate is
"too high"). The best rate is *at the grid's edge* when it is the lowest or the highest rate
tried: then a better rate may lie outside the grid, and the report says so.

The claims (:func:`best_rate_speedups`, issue 20 item 5) use the targets
:data:`SPEEDUP_TARGETS` (90%, 95%, 97%, fixed before the run), each network at its own best rate *for
that target*, per seed the ratio no-BN steps / BN steps, and the verdict of :mod:`bnexp.report.claims`.
"""

from __future__ import annotations

import math

import pandas as pd

from bnexp.report.claims import INCONCLUSIVE, NOT_SUPPORTED, Claim, by_seed, claims_md, evaluate
from bnexp.report.evidence import CHANCE_MARGIN, NUM_CLASSES
from bnexp.report.fmt import format_target, md_table
from bnexp.report.groups import ConfigGroup, bn_variant, pair_label
from bnexp.report.load import Sweep, config_key
from bnexp.report.stats import numeric, optional, reach_stat, target_steps


def rate_families(groups: list[ConfigGroup]) -> list[list[ConfigGroup]]:
    """The families of configurations that differ only in ``lr`` (two rates or more), each sorted by rate."""
    fams: dict[str, list[ConfigGroup]] = {}
    for g in groups:
        if g.lr is not None and not g.key.startswith("summary:"):
            fams.setdefault(config_key(g.config, ("lr",)), []).append(g)
    return [sorted(f, key=lambda g: g.lr) for f in fams.values() if len(f) > 1]


def _family_name(family: list[ConfigGroup], groups: list[ConfigGroup]) -> str:
    g = family[0]
    v = bn_variant(g) or g.label
    others = [p for p in pair_label(g, groups).split() if not p.startswith("lr=")]
    return " ".join([v] + others) if others else v


# Fixed before the MNIST re-run (issue 20, item 5; docs/mnist/README.md "Design"): the targets of the claims
# "BN trains in fewer steps", each network at its own best rate for that target, and the threshold of the
# seed-mean ratio no-BN steps / BN steps that the bootstrap 95% interval must clear.
SPEEDUP_TARGETS = (0.90, 0.95, 0.97)
SPEEDUP_THRESHOLD = 1.0
SPEEDUP_TITLE = "Speedup at each network's own best rate, per target (claims)"
EVERY_SEED = "every seed reached"
CENSORED = "censored at the budget"
LOWER = "lower bound"


def init_of(config: dict) -> str:
    """The weight init of a configuration: ``model.init``; for configs without the key (older runs)
    "normal" when ``model.init_std`` is set, else "torch"; "unknown" without model keys."""
    if config.get("model.init"):
        return str(config["model.init"])
    if not any(k.startswith("model.") for k in config):
        return "unknown"
    return "normal" if config.get("model.init_std") is not None else "torch"


def best_rate_for_target(family: list[ConfigGroup], steps: pd.Series, target: float) -> dict:
    """The rate of ``family`` (sorted by rate) used for the speedup at ``target``: the fewest mean steps among
    the rates where every completed seed reached the target and none diverged; when no rate qualifies, the
    rate without divergence whose mean steps are fewest with every unreached seed counted at its budget
    (trainer.max_steps), selection :data:`CENSORED`.

    Returns:
        {"lr" (None when no rate has a completed run without divergence), "selection" (:data:`EVERY_SEED` or
        :data:`CENSORED`), "edge" (None, "lowest" or "highest" rate of the grid), "budget" (max_steps),
        "steps": {seed: steps to the target, None if not reached}, "runs": {seed: run id}}.
    """
    def reached_mean(g: ConfigGroup) -> float | None:  # mean steps when every completed seed reached it
        st = reach_stat(steps.reindex([r.id for r in g.completed]))
        ok = st["n"] and st["reached"] == st["n"] and not any(r.status == "diverged" for r in g.runs)
        return st["mean"] if ok else None

    ok = [g for g in family if reached_mean(g) is not None]
    group, selection = (min(ok, key=reached_mean) if ok else None), EVERY_SEED
    if group is None:
        def censored_mean(g: ConfigGroup) -> float:
            vals = [steps.get(r.id) for r in g.completed]
            return sum(g.max_steps if v is None or math.isnan(v) else v for v in vals) / len(vals)

        cands = [g for g in family if g.completed and g.max_steps and not any(r.status == "diverged" for r in g.runs)]
        group, selection = (min(cands, key=censored_mean), CENSORED) if cands else (None, None)
    if group is None:
        return {"lr": None, "selection": None, "edge": None, "budget": None, "steps": {}, "runs": {}}
    grid = [g.lr for g in family]
    edge = "lowest" if group.lr == min(grid) else "highest" if group.lr == max(grid) else None
    runs = [r for r in group.completed if r.seed is not None]
    return {"lr": group.lr, "selection": selection, "edge": edge, "budget": group.max_steps,
            "steps": {r.seed: optional(steps.get(r.id), int) for r in runs}, "runs": {r.seed: r.id for r in runs}}


def seed_ratio(bn_steps: int | None, no_bn_steps: int | None,
               no_bn_budget: int | None) -> tuple[float | None, str | None]:
    """One seed's speedup no-BN steps / BN steps and how to read it: (ratio, None) when both reached the
    target; (no-BN budget / BN steps, :data:`LOWER`) when only BN did (no BN needs more than its budget, so
    the true ratio is larger); (None, reason) when BN did not (the ratio would only be an upper bound) or
    a value is missing."""
    if bn_steps is None:
        return None, "BN did not reach it (the ratio would be an upper bound)" if no_bn_steps is not None else \
            "neither reached it"
    if bn_steps <= 0:
        return None, "BN was at the target at step 0"
    if no_bn_steps is not None:
        return no_bn_steps / bn_steps, None
    if not no_bn_budget:
        return None, "no BN did not reach it and its budget is unknown"
    return no_bn_budget / bn_steps, LOWER


def _speedup_row(bn: list[ConfigGroup], nb: list[ConfigGroup], groups: list[ConfigGroup], steps: pd.Series,
                 target: float, max_acc: pd.Series) -> dict:
    """One claims row (:func:`bnexp.report.claims.evaluate`) of :func:`best_rate_speedups`."""
    variant, init, tgt = bn_variant(bn[0]), init_of(bn[0].config), format_target(target)
    b, n = best_rate_for_target(bn, steps, target), best_rate_for_target(nb, steps, target)
    per_seed, notes = {}, {}
    for s in sorted(set(b["steps"]) | set(n["steps"])):
        if s in b["steps"] and s in n["steps"]:
            per_seed[s], notes[s] = seed_ratio(b["steps"][s], n["steps"][s], n["budget"])
        else:
            per_seed[s], notes[s] = None, "missing on one side"
    chance = 1 / NUM_CLASSES + CHANCE_MARGIN
    never = sorted({s for side in (b, n) for s, rid in side["runs"].items()
                    if not (max_acc.get(rid, math.nan) > chance)})
    missing = [name for name, side in ((_family_name(bn, groups), b), (_family_name(nb, groups), n))
               if side["lr"] is None]
    premise = (f"{' and '.join(missing)}: no rate of the grid has a completed run without divergence"
               if missing else None)
    claim = Claim(f"{variant} trains in fewer steps to {tgt} ({init} init)",
                  f"no-BN steps / {variant} steps to {tgt}, seed by seed, each at its own best rate for {tgt}",
                  ">", SPEEDUP_THRESHOLD)
    row = evaluate(claim, per_seed, never_learned=never, premise=premise)
    lower = [s for s, why in notes.items() if why == LOWER and per_seed[s] is not None]
    left_out = {s: why for s, why in notes.items() if why not in (None, LOWER)}
    if lower:
        where = (f"seed(s) {', '.join(map(str, lower))}: lower bounds (no BN did not reach {tgt} within "
                 f"{n['budget']:,} steps)")
        if row["verdict"] == NOT_SUPPORTED:
            row["verdict"], row["reason"] = INCONCLUSIVE, f"{row['reason']}, but {where}, so the true ratios are larger"
        else:
            row["reason"] = f"{row['reason']}; {where}"
    if left_out:
        row["reason"] += "; left out: " + "; ".join(f"seed {s} ({why})" for s, why in left_out.items())
    return row | {"target": target, "init": init, "variant": variant, "bn": _family_name(bn, groups),
                  "no_bn": _family_name(nb, groups), "bn_lr": b["lr"], "no_bn_lr": n["lr"],
                  "bn_selection": b["selection"], "no_bn_selection": n["selection"], "bn_edge": b["edge"],
                  "no_bn_edge": n["edge"], "bn_steps": b["steps"], "no_bn_steps": n["steps"],
                  "bn_budget": b["budget"], "no_bn_budget": n["budget"], "lower_bound_seeds": lower,
                  "left_out": left_out}


def best_rate_speedups(groups: list[ConfigGroup], sweep: Sweep, targets=SPEEDUP_TARGETS) -> list[dict]:
    """The claims "BN trains in fewer steps to T" for every target T of ``targets`` and every setting (weight
    init, ...) with a BN (or noisy BN) and a no-BN rate family: each network at its own best rate for T
    (:func:`best_rate_for_target`), per seed s the ratio no-BN steps of seed s / BN steps of seed s
    (:func:`seed_ratio`), then the seed mean, bootstrap 95% interval, sample std and verdict of
    :func:`bnexp.report.claims.evaluate` against :data:`SPEEDUP_THRESHOLD`. A seed whose run at a chosen
    rate never left chance makes the row inconclusive; lower-bound ratios turn "not supported" into
    "inconclusive" (they can only understate the speedup).

    Returns:
        claims rows (report.json ``best_rate_speedups``), the paper's init first, then by init and target,
        each with the extra fields "target", "init", "variant", "bn", "no_bn", "bn_lr", "no_bn_lr",
        "bn_selection", "no_bn_selection", "bn_edge", "no_bn_edge", "bn_steps", "no_bn_steps" ({seed:
        steps or None}), "bn_budget", "no_bn_budget", "lower_bound_seeds", "left_out" ({seed: reason}).
    """
    settings: dict[str, dict[str, list[ConfigGroup]]] = {}
    for fam in rate_families(groups):
        v = bn_variant(fam[0])
        if v is not None:
            settings.setdefault(config_key(fam[0].config, ("lr", "bn", "experiment")), {})[v] = fam
    m = sweep.metrics
    max_acc = numeric(m.get("test_accuracy", [])).set_axis(m.index).groupby(m["run"]).max() if len(m) else pd.Series()
    rows = []
    for target in targets:
        steps = target_steps(sweep, target)
        for setting in settings.values():
            for variant in ("BN", "noisy BN"):
                if variant in setting and "no BN" in setting:
                    rows.append(_speedup_row(setting[variant], setting["no BN"], groups, steps, target, max_acc))
    order = {"normal": 0}
    return sorted(rows, key=lambda r: (order.get(r["init"], 1), r["init"], r["variant"], r["target"]))


def _steps_cell(steps: dict) -> str:
    return ", ".join(f"{s}: {'not reached' if v is None else f'{v:,}'}" for s, v in by_seed(steps)) or "-"


def per_seed_ratios(row: dict, unit: str = "") -> str:
    """The per-seed no-BN / BN ratios of a :func:`best_rate_speedups` row, live or read back from
    report.json: "1: 2.80x, 2: >= 3.00x, 3: -" (">=": a lower bound, "-": no value), "-" without seeds."""
    lower = {int(s) for s in row["lower_bound_seeds"]}
    return ", ".join(f"{s}: " + ("-" if v is None else (">= " if int(s) in lower else "") + f"{v:.2f}{unit}")
                     for s, v in by_seed(row["per_seed"])) or "-"


def best_rate_speedups_md(rows: list[dict]) -> list[str]:
    """Markdown of :func:`best_rate_speedups`: the rule, the claims table (:func:`bnexp.report.claims.claims_md`)
    and per row the chosen rates and every seed's steps ([] without rows)."""
    if not rows:
        return []
    tgts = ", ".join(format_target(t) for t in SPEEDUP_TARGETS)
    out = [f"## {SPEEDUP_TITLE}", "",
           f"Targets {tgts} and the threshold {SPEEDUP_THRESHOLD:g} are fixed before the run. For each target, each "
           "network runs at the rate of its grid with the fewest mean steps to that target among the rates where "
           "every seed reached it and none diverged (the best rate is chosen per target; \"censored\": no rate had "
           "every seed reach it, so unreached seeds count at the budget). Seed s's value is no-BN steps / BN steps of "
           "seed s; a no-BN seed that never reached the target counts at its budget, so its ratio is a lower bound "
           "(\">=\"; a \"not supported\" is then \"inconclusive\"); a BN seed that never reached it is left out. "
           "Supported: the bootstrap 95% interval of the seed mean lies above the threshold; a run that never left "
           "chance or fewer than 3 seeds make it inconclusive. Steps are those of the first evaluation at or above "
           "the target, so they are resolved to the evaluation spacing.", ""]
    return out + claims_md(rows) + best_rate_detail_md(rows)


def best_rate_detail_md(rows: list[dict]) -> list[str]:
    """Markdown table of :func:`best_rate_speedups` rows: per init and target, each network's chosen rate
    (with "(edge of grid)" and "censored" marks), every seed's steps and the per-seed ratios (">=": a lower
    bound). Used by report.md and the docs view ``mnist_best_rate``."""
    detail = [[r["init"], format_target(r["target"]),
               "-" if r["bn_lr"] is None else f"{r['bn_lr']:g}" + (f" ({r['bn_edge']} of grid)" if r["bn_edge"] else "")
               + (" censored" if r["bn_selection"] == CENSORED else ""), _steps_cell(r["bn_steps"]),
               "-" if r["no_bn_lr"] is None else f"{r['no_bn_lr']:g}"
               + (f" ({r['no_bn_edge']} of grid)" if r["no_bn_edge"] else "")
               + (" censored" if r["no_bn_selection"] == CENSORED else ""), _steps_cell(r["no_bn_steps"]),
               per_seed_ratios(r)] for r in rows]
    return md_table(["init", "target", "BN best lr", "BN steps per seed", "no-BN best lr", "no-BN steps per seed",
                     "no BN / BN per seed"], detail) + [""]
