"""Paper Sec. 4.2 on CIFAR-10, matched-accuracy form: the tuned baseline, its plateau, steps to
97/99/100% of its plateau accuracy, the matched-accuracy speedup curve, the pass rule and the
other Sec. 4.2 claims (docs/cifar/PLAN.md states the design and the rule before the run).

Definitions (all test accuracies from ``metrics.jsonl``; a run's curve is its evaluations by step):

* *plateau accuracy* of a run: the mean of its last :data:`PLATEAU_EVALS` evaluations; of a
  configuration: the mean of that over its finished seeds.
* *the baseline*: among the configurations of experiment ``baseline`` (the rate grid), the one
  with the highest plateau accuracy; the report says whether its rate lies inside the grid or at
  an edge (then the grid should be extended).
* *target*: the baseline's plateau accuracy. *Plateau check*: on the seed-mean curve, the plateau
  minus the mean of the :data:`PLATEAU_EVALS` evaluations ending at 3/4 of the budget is below
  :data:`PLATEAU_RISE` (0.5 points); otherwise "baseline not converged".
* *steps to a level* (a fraction of the target): the first evaluation at or above level x target;
  per seed, and on a configuration's seed-mean curve (the mean over seeds at each evaluation step
  common to all seeds). The baseline's steps are those of its seed-mean curve, which always
  reaches 100% (its plateau is a mean of its own last values).
* *matched-accuracy speedup* at a level: baseline steps / preset steps (seed-mean curves).
* *pass rule*: BN-x5 reaches 100% of the target in at most 1/:data:`PASS_FACTOR` of the
  baseline's steps, in every seed.
"""

from __future__ import annotations

import sys

import numpy as np

from bnexp.report.groups import ConfigGroup
from bnexp.report.load import ReportError, Run, find_run_dirs, load_run
from bnexp.report.stats import finite

PLATEAU_EVALS = 3
PLATEAU_RISE = 0.005
TABLE_LEVELS = (0.97, 0.99, 1.0)
CURVE_LEVELS = tuple(round(0.80 + 0.01 * i, 2) for i in range(21))  # 80%, 81%, ..., 100% of the target
PASS_FACTOR = 5.0
CHANCE = 0.10  # CIFAR-10: 10 classes
PRESET_ORDER = ("baseline", "bn_baseline", "bn_x5", "bn_x30", "bn_x5_sigmoid", "baseline_x5", "baseline_sigmoid")


def curve(run: Run) -> tuple[list[int], list[float]]:
    """(steps, test accuracies) of a run's evaluations, by step (non-finite values left out)."""
    pts = [(int(r["step"]), float(r["test_accuracy"])) for r in run.metrics
           if isinstance(r.get("step"), int) and finite([r.get("test_accuracy")])]
    pts.sort()
    return [s for s, _ in pts], [a for _, a in pts]


def mean_curve(runs: list[Run]) -> tuple[list[int], list[float]]:
    """The seed-mean curve: at every evaluation step common to all ``runs``, the mean accuracy."""
    curves = [dict(zip(*curve(r))) for r in runs]
    if not curves:
        return [], []
    steps = sorted(set.intersection(*(set(c) for c in curves)))
    return steps, [float(np.mean([c[s] for c in curves])) for s in steps]


def plateau(accs: list[float], k: int = PLATEAU_EVALS) -> float | None:
    """Mean of the last ``k`` values (None for an empty curve)."""
    return float(np.mean(accs[-k:])) if accs else None


def plateau_check(steps: list[int], accs: list[float], max_steps: int, k: int = PLATEAU_EVALS) -> dict:
    """How much the curve rose over the last quarter of its budget.

    Returns:
        {"plateau": mean of the last k values, "at_three_quarters": mean of the k values ending at
        the last evaluation step <= 3/4 * max_steps, "rise": their difference (accuracy units),
        "converged": rise < :data:`PLATEAU_RISE`}; values None when the curve is too short.
    """
    end = plateau(accs, k)
    idx = [i for i, s in enumerate(steps) if s <= 0.75 * max_steps]
    if end is None or not idx or idx[-1] + 1 >= len(steps):
        return {"plateau": end, "at_three_quarters": None, "rise": None, "converged": None}
    j = idx[-1] + 1
    q = float(np.mean(accs[max(0, j - k):j]))
    return {"plateau": end, "at_three_quarters": q, "rise": end - q, "converged": end - q < PLATEAU_RISE}


def first_at(steps: list[int], accs: list[float], level: float) -> int | None:
    """The first step whose accuracy is >= ``level`` (None when never)."""
    return next((s for s, a in zip(steps, accs) if a >= level - 1e-12), None)


def _finished(g: ConfigGroup) -> list[Run]:
    return [r for r in g.runs if r.status == "finished" and r.metrics]


def baseline_grid(groups: list[ConfigGroup]) -> dict | None:
    """The baseline's rate grid: every ``baseline`` configuration's rate and plateau; the best.

    Returns:
        None without baseline runs; else {"rates": [{"lr", "plateau", "seeds", "label"}] by rate,
        "best_lr", "best_label", "position": "inside" | "low edge" | "high edge" | "single rate"}.
    """
    rows = []
    for g in groups:
        runs = _finished(g)
        if g.experiment != "baseline" or not runs:
            continue
        per_seed = [plateau(curve(r)[1]) for r in runs]
        rows.append({"lr": g.lr, "plateau": float(np.mean(per_seed)), "seeds": len(runs), "label": g.label,
                     "key": g.key})
    if not rows:
        return None
    rows.sort(key=lambda r: (r["lr"] is None, r["lr"] or 0.0))
    best = max(range(len(rows)), key=lambda i: rows[i]["plateau"])
    position = ("single rate" if len(rows) == 1 else "low edge" if best == 0
                else "high edge" if best == len(rows) - 1 else "inside")
    return {"rates": rows, "best_lr": rows[best]["lr"], "best_label": rows[best]["label"],
            "best_key": rows[best]["key"], "position": position}


def tuned_first(groups: list[ConfigGroup]) -> list[ConfigGroup]:
    """``groups`` with the tuned baseline first among the baseline configurations (for
    :func:`bnexp.report.stats.sec42_table`, which takes the first ``baseline`` it finds)."""
    grid = baseline_grid(groups)
    if grid is None:
        return groups
    return sorted(groups, key=lambda g: g.key != grid["best_key"])


def _preset_groups(groups: list[ConfigGroup], grid: dict) -> list[ConfigGroup]:
    """The presets compared with the baseline: the tuned baseline, then every non-baseline preset."""
    base = [g for g in groups if g.key == grid["best_key"]]
    others = [g for g in groups if g.experiment and g.experiment != "baseline"]
    order = {n: i for i, n in enumerate(PRESET_ORDER)}
    return base + sorted(others, key=lambda g: (order.get(g.experiment, 99), g.label))


def _speedup(base: int | None, steps: int | None) -> float | None:
    return base / steps if base is not None and steps else None


def matched_accuracy(groups: list[ConfigGroup]) -> dict | None:
    """Everything of the matched-accuracy Sec. 4.2 section (see the module docstring).

    Returns:
        None without a finished ``baseline`` configuration; else {"grid", "target",
        "baseline_check", "levels", "curve_levels", "rows": [per preset: "label", "experiment",
        "lr", "seeds", "diverged", "max_steps", "plateau", "check", "steps" {level: {"per_seed",
        "mean_curve"}}, "speedup" {level: x}, "curve" [speedup per curve level]], "pass_rule",
        "claims": [sentences]}.
    """
    grid = baseline_grid(groups)
    if grid is None:
        return None
    presets = _preset_groups(groups, grid)
    base_g = presets[0]
    bs, ba = mean_curve(_finished(base_g))
    target = plateau(ba)
    base_check = plateau_check(bs, ba, base_g.max_steps or (bs[-1] if bs else 0))
    levels = sorted(set(TABLE_LEVELS) | set(CURVE_LEVELS))
    base_steps = {lv: first_at(bs, ba, lv * target) for lv in levels}
    rows = []
    for g in presets:
        runs = _finished(g)
        s, a = mean_curve(runs)
        per_seed_curves = [curve(r) for r in runs]
        steps = {lv: {"per_seed": [first_at(cs, ca, lv * target) for cs, ca in per_seed_curves],
                      "mean_curve": first_at(s, a, lv * target)} for lv in levels}
        label = (f"baseline (lr={g.lr:g})" if g.experiment == "baseline" and g.lr is not None
                 else g.experiment or g.label)
        rows.append({
            "label": label, "experiment": g.experiment, "lr": g.lr, "seeds": len(runs),
            "diverged": sum(r.status == "diverged" for r in g.runs), "max_steps": g.max_steps,
            "plateau": plateau(a), "plateau_per_seed": [plateau(ca) for _, ca in per_seed_curves],
            "check": plateau_check(s, a, g.max_steps or (s[-1] if s else 0)),
            "steps": {f"{lv:g}": v for lv, v in steps.items()},
            "speedup": {f"{lv:g}": _speedup(base_steps[lv], steps[lv]["mean_curve"]) for lv in levels},
            "curve": [_speedup(base_steps[lv], steps[lv]["mean_curve"]) for lv in CURVE_LEVELS],
        })
    out = {"grid": {k: v for k, v in grid.items() if k != "best_key"}, "target": target,
           "baseline_label": base_g.label, "baseline_check": base_check,
           "baseline_steps": {f"{lv:g}": base_steps[lv] for lv in levels},
           "levels": list(TABLE_LEVELS), "curve_levels": list(CURVE_LEVELS), "rows": rows}
    out["pass_rule"] = pass_rule(out)
    out["claims"] = claims(out)
    return out


def _row(sec: dict, experiment: str) -> dict | None:
    return next((r for r in sec["rows"] if r["experiment"] == experiment), None)


def pass_rule(sec: dict) -> dict:
    """The pass rule: BN-x5 reaches 100% of the target within baseline steps / PASS_FACTOR in every seed.

    Returns:
        {"verdict": "pass" | "fail" | "n/a", "limit": baseline steps / PASS_FACTOR, "per_seed",
        "text"}; "n/a" without BN-x5 runs; the text also says "baseline not converged" when the
        plateau check failed (the verdict is then provisional).
    """
    row = _row(sec, "bn_x5")
    base = sec["baseline_steps"]["1"]
    limit = base / PASS_FACTOR if base is not None else None
    if row is None or not row["seeds"] or limit is None:
        return {"verdict": "n/a", "limit": limit, "per_seed": [],
                "text": "n/a: no finished bn_x5 runs or no baseline steps to the target."}
    per = row["steps"]["1"]["per_seed"]
    ok = all(s is not None and s <= limit for s in per)
    seeds = ", ".join("not reached" if s is None else f"{s:,}" for s in per)
    text = (f"{'PASS' if ok else 'FAIL'}: bn_x5 reached 100% of the target ({100 * sec['target']:.2f}%) at steps "
            f"[{seeds}] per seed; the rule needs <= {limit:,.0f} (the baseline's {base:,} steps / "
            f"{PASS_FACTOR:g}) in every seed.")
    if sec["baseline_check"]["converged"] is False:
        text += " Baseline not converged: the target is provisional."
    return {"verdict": "pass" if ok else "fail", "limit": limit, "per_seed": per, "text": text}


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.2f}%"


def _steps(v: int | None) -> str:
    return "not reached" if v is None else f"{v:,}"


def claims(sec: dict) -> list[str]:
    """The other Sec. 4.2 claims, each with its evidence (one sentence each, absent presets skipped)."""
    out = []
    base = sec["baseline_steps"]
    b, x5, x30 = _row(sec, "bn_baseline"), _row(sec, "bn_x5"), _row(sec, "bn_x30")
    if b:
        sp = b["speedup"]["1"]
        out.append(f"BN-Baseline faster than the baseline (paper: 2.3x fewer steps to Inception's best): "
                   f"bn_baseline reached 100% of the target in {_steps(b['steps']['1']['mean_curve'])} steps "
                   f"(seed-mean curve), the baseline in {_steps(base['1'])}"
                   + (f": {sp:.2f}x" if sp else "") + f"; plateau {_pct(b['plateau'])} vs {_pct(sec['target'])}.")
    if x5 and x30:
        s5, s30 = x5["steps"]["0.97"]["mean_curve"], x30["steps"]["0.97"]["mean_curve"]
        out.append(f"BN-x30 vs BN-x5 (paper: BN-x30 slower at first, ends higher, 74.8% vs 73.0%): steps to 97% "
                   f"of the target {_steps(s30)} (x30) vs {_steps(s5)} (x5); plateau {_pct(x30['plateau'])} vs "
                   f"{_pct(x5['plateau'])}.")
    sig, bsig = _row(sec, "bn_x5_sigmoid"), _row(sec, "baseline_sigmoid")
    if sig or bsig:
        parts = []
        if sig:
            st = sig["steps"]["1"]["mean_curve"]
            parts.append(f"bn_x5_sigmoid plateau {_pct(sig['plateau'])}, "
                         + ("did not reach 100% of the target" if st is None else f"100% of the target in {st:,} steps"))
        if bsig:
            trains = bsig["plateau"] is not None and bsig["plateau"] > CHANCE + 0.05
            parts.append(f"baseline_sigmoid plateau {_pct(bsig['plateau'])} "
                         f"({'trains' if trains else 'does not train: within 5 points of chance, 10%'})")
        out.append("BN-x5-Sigmoid vs the sigmoid baseline (paper: 69.8% vs does not train): " + "; ".join(parts) + ".")
    bx5 = _row(sec, "baseline_x5")
    if bx5:
        div = f"{bx5['diverged']} of {bx5['diverged'] + bx5['seeds']} runs diverged"
        out.append(f"The baseline at 5x the rate (paper: diverges): {div}; finished seeds' plateau "
                   f"{_pct(bx5['plateau'])} vs the baseline's {_pct(sec['target'])}.")
    return out


def _fmt_x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def markdown(sec: dict) -> list[str]:
    """report.md lines of the matched-accuracy Sec. 4.2 section."""
    g = sec["grid"]
    out = ["## Sec. 4.2, matched accuracy: steps to the tuned baseline's plateau", "",
           "Baseline rate grid (plateau = mean of the last "
           f"{PLATEAU_EVALS} evaluations, mean over seeds): "
           + ", ".join(f"lr={r['lr']:g}: {_pct(r['plateau'])} ({r['seeds']} seeds)" for r in g["rates"])
           + f". The baseline is lr={g['best_lr']:g} ({g['position']} of the grid"
           + ("" if g["position"] == "inside" else "; the grid should be extended beyond it") + ").", ""]
    c = sec["baseline_check"]
    if c["rise"] is None:
        check = "n/a (too few evaluations)"
    else:
        check = (f"rose {100 * c['rise']:.2f} points over the last quarter of its budget "
                 f"({_pct(c['at_three_quarters'])} -> {_pct(c['plateau'])}): "
                 + ("converged (< 0.5 points)" if c["converged"] else "**baseline not converged** (>= 0.5 points)"))
    out += [f"Target: the baseline's plateau accuracy, **{_pct(sec['target'])}**. Plateau check: {check}.", ""]
    head = ["preset", "lr", "seeds", "budget", "plateau (%)", "rise, last quarter"]
    for lv in sec["levels"]:
        head += [f"steps to {lv:.0%}", f"speedup {lv:.0%}"]
    rows = []
    for r in sec["rows"]:
        rise = r["check"]["rise"]
        row = [r["label"], "n/a" if r["lr"] is None else f"{r['lr']:g}", str(r["seeds"]),
               "n/a" if r["max_steps"] is None else f"{r['max_steps']:,}",
               "n/a" if r["plateau"] is None else f"{100 * r['plateau']:.2f}",
               "n/a" if rise is None else f"{100 * rise:+.2f}"]
        for lv in sec["levels"]:
            st = r["steps"][f"{lv:g}"]
            seeds = " / ".join(_steps(s) for s in st["per_seed"])
            row += [f"{_steps(st['mean_curve'])} ({seeds})", _fmt_x(r["speedup"][f"{lv:g}"])]
        rows.append(row)
    out += ["Steps to 97/99/100% of the target on the seed-mean curve (per seed in parentheses); speedup = "
            "baseline steps / preset steps at the same accuracy.", ""]
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows] + [""]
    out += ["![Matched-accuracy speedup: baseline steps / preset steps](matched_accuracy.png)", "",
            f"**Pass rule** (stated in docs/cifar/PLAN.md before the run): {sec['pass_rule']['text']}", ""]
    out += [f"- {c}" for c in sec["claims"]] + [""]
    return out


def best_baseline_lr(sweep_dir) -> dict:
    """The grid's winner in a sweep folder (scripts/reproduce_cifar.sh, between its two stages).

    Raises:
        ReportError: no finished ``baseline`` runs under ``sweep_dir``.
    """
    from bnexp.report.groups import group_runs

    runs = [load_run(d) for d in find_run_dirs(sweep_dir)]
    grid = baseline_grid(group_runs(runs)) if runs else None
    if grid is None or grid["best_lr"] is None:
        raise ReportError(f"no finished baseline runs under {sweep_dir}: run the rate grid first.")
    return grid


def main(argv: list[str] | None = None) -> int:
    """``python -m bnexp.report.sec42 best-lr SWEEP_DIR``: print the best baseline rate and its position
    in the grid (``inside``, ``low-edge``, ``high-edge`` or ``single-rate``) on stdout, e.g. ``0.025 inside``,
    and the grid's plateaus on stderr. Exit 2 with one message when there are no finished baseline runs."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "best-lr":
        print("usage: python -m bnexp.report.sec42 best-lr SWEEP_DIR", file=sys.stderr)
        return 2
    try:
        grid = best_baseline_lr(args[1])
    except ReportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rates = ", ".join(f"{r['lr']:g}: {100 * r['plateau']:.2f}%" for r in grid["rates"])
    print(f"baseline rate grid (plateau accuracy): {rates}; best {grid['best_lr']:g} ({grid['position']})",
          file=sys.stderr)
    print(f"{grid['best_lr']:g} {grid['position'].replace(' ', '-')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["CURVE_LEVELS", "PASS_FACTOR", "PLATEAU_EVALS", "PLATEAU_RISE", "TABLE_LEVELS", "baseline_grid",
           "best_baseline_lr", "claims", "curve", "first_at", "markdown", "matched_accuracy", "mean_curve",
           "pass_rule", "plateau", "plateau_check", "tuned_first"]
