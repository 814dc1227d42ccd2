"""The study section of ``bnexp report`` (issue 23): a sweep of ``scripts/study.sh NAME`` -> the study's
claims, fixed in code before the run (:mod:`bnexp.report.study_claims`), each with its per-seed values,
bootstrap 95% interval and verdict (:func:`bnexp.report.claims.evaluate`), a table of the numbers per
configuration and one figure (:mod:`bnexp.report.figures_studies`, which also writes it: ``study_files``).

A sweep folder is a study's when it holds ``study.json`` (written by scripts/study.sh) with the study's
name; report.json then has the key ``study``. The runs are read once into a DataFrame of *cells*
(:func:`cells`), one row per completed run (finished or diverged) with the coordinates the studies vary
(normalizer, m, rate, momentum, position, nonlinearity, model, depth, seed) and its numbers.

Conventions shared by the studies (docs/studies/README.md states them for readers):

* *steps to a target* is the first evaluated step whose test accuracy is >= the target; a run that never
  reached it is *censored* at its budget (its last step), which is a lower bound on its steps;
* a ratio of censored steps (:func:`censored_ratio`) is a bound, and a bound is used for a claim only
  when it cannot make the claim look better than it is (:func:`usable`); otherwise that seed drops out
  (fewer seeds: inconclusive);
* *best rate* (:func:`best_rate`): among the rates where every completed seed reached the target and
  none diverged, the one with the fewest mean steps; when no rate qualifies, the one with the highest
  mean final test accuracy. It is chosen on the same seeds the claim then uses (a small optimistic bias
  that applies to every configuration alike).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd

from bnexp.report.claims import Claim, claims_md, evaluate, seed_interval
from bnexp.report.fmt import md_table
from bnexp.runs.rundir import first_reached

log = logging.getLogger("bnexp")

MARKER = "study.json"
NAMES = {"batch": "BN", "layer": "LayerNorm", "group": "GroupNorm", "none": "no BN", "ghost": "ghost BN",
         "noisy": "noisy BN"}


def read_marker(sweep_dir: Path) -> dict | None:
    """The sweep's ``study.json`` ({"study": NAME, ...}), or None when absent or unreadable."""
    try:
        d = json.loads((Path(sweep_dir) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("study"), str) else None


def normalizer(config: dict) -> str:
    """The normalizer of a run from its flattened config: "none" (bn.enabled false), "layer", "group"
    (``bn.norm``), "noisy" (``bn.noise``), "ghost" (``bn.ghost_batch_size`` set) or "batch"."""
    if config.get("bn.enabled") is False:
        return "none"
    norm = str(config.get("bn.norm", "batch")).rsplit(".", 1)[-1]
    if norm in ("layer", "group"):
        return norm
    if config.get("bn.noise"):
        return "noisy"
    return "ghost" if config.get("bn.ghost_batch_size") not in (None, "null") else "batch"


def _text(v) -> str | None:
    return None if v is None else str(v).rsplit(".", 1)[-1]


def cells(runs, target: float, extra=None) -> pd.DataFrame:
    """One row per completed run (finished or diverged; the others are left out):

    run (path), seed, status, norm (:func:`normalizer`), ghost, groups, m, lr, momentum, position, act,
    model, depth (hidden layers of an MLP), budget (the run's last step), final (final test accuracy,
    fraction), steps (first evaluated step at >= ``target``, None: not reached), examples (steps * m),
    wall_time_s, and the columns ``extra(run)`` returns (a dict, e.g. the inference accuracies).

    Args:
        runs: :class:`bnexp.report.load.Run` objects.
        target: test accuracy in (0, 1].
    """
    rows = []
    for r in runs:
        if not r.completed or r.seed is None:
            continue
        c, s = r.config, r.summary
        m = int(c.get("trainer.batch_size", s.get("batch_size", 60)))
        hidden = c.get("model.hidden")
        steps = first_reached(sorted(r.metrics, key=lambda x: x["step"]), target)
        budget = int(s.get("step") or c.get("trainer.max_steps") or max(x["step"] for x in r.metrics))
        final = s.get("final_test_accuracy", r.metrics[-1].get("test_accuracy"))
        rows.append({
            "run": str(r.path), "seed": int(r.seed), "status": r.status, "norm": normalizer(c),
            "ghost": c.get("bn.ghost_batch_size"), "groups": c.get("bn.groups"), "m": m,
            "lr": float(c.get("lr", s.get("lr", math.nan))), "momentum": c.get("bn.momentum"),
            "position": _text(c.get("bn.position", "before")), "act": _text(c.get("act", s.get("act"))),
            "model": str(c.get("model.name", s.get("model", "mlp"))),
            "depth": len(hidden) if isinstance(hidden, list) else None, "budget": budget,
            "final": None if final is None else float(final), "steps": steps,
            "examples": None if steps is None else steps * m, "wall_time_s": s.get("wall_time_s"),
            **(extra(r) if extra else {})})
    cols = ["run", "seed", "status", "norm", "ghost", "groups", "m", "lr", "momentum", "position", "act", "model",
            "depth", "budget", "final", "steps", "examples", "wall_time_s"]
    return pd.DataFrame(rows, columns=cols + [k for k in (rows[0] if rows else {}) if k not in cols])


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


def per_seed(frame: pd.DataFrame, column: str) -> dict[int, float | None]:
    """{seed: value of ``column``} (the mean when a seed has several rows; None when missing)."""
    out = {}
    for seed, g in frame.groupby("seed"):
        v = pd.to_numeric(g[column], errors="coerce").dropna()
        out[int(seed)] = float(v.mean()) if len(v) else None
    return out


def censored(frame: pd.DataFrame, unit: str = "steps") -> dict[int, tuple[float, bool]]:
    """{seed: (steps or examples to the target, censored)}: a run that never reached it counts as its
    budget (``unit`` "examples": budget * m) with ``censored`` True."""
    out = {}
    for _, row in frame.iterrows():
        if row["steps"] is None or (isinstance(row["steps"], float) and math.isnan(row["steps"])):
            out[int(row["seed"])] = (float(row["budget"] * (row["m"] if unit == "examples" else 1)), True)
        else:
            out[int(row["seed"])] = (float(row["steps"] * (row["m"] if unit == "examples" else 1)), False)
    return out


def censored_ratio(num: tuple[float, bool], den: tuple[float, bool]) -> tuple[float | None, str]:
    """num / den of two (value, censored) steps: ("exact"), a "lower" bound (only num censored: the true
    num is larger), an "upper" bound (only den censored) or (None, "unknown") when both are censored."""
    (a, ca), (b, cb) = num, den
    if ca and cb:
        return None, "unknown"
    return a / b, "lower" if ca else "upper" if cb else "exact"


def usable(value: float | None, bound: str, claim: Claim) -> float | None:
    """``value`` where it may enter ``claim``: exact values always; a lower bound for a ">" claim (the true
    value is at least as large) and an upper bound for a "<" claim; a bound on the other side only when it
    already lies on the wrong side of the threshold (it then counts against the claim); else None."""
    if value is None or bound == "unknown":
        return None
    if bound == "exact":
        return value
    helps = (bound == "lower") == (claim.direction == ">")
    if helps:
        return value
    wrong_side = value <= claim.threshold if claim.direction == ">" else value >= claim.threshold
    return value if wrong_side else None


def ratio_claim(claim: Claim, num: pd.DataFrame, den: pd.DataFrame, unit: str = "steps",
                premise: str | None = None) -> dict:
    """Evaluate ``claim`` on the per-seed censored ratio num / den of steps (or examples) to the target,
    seeds paired; a configuration without runs makes the premise fail."""
    if premise is None and (num.empty or den.empty):
        premise = "no completed runs of one of the two configurations"
    a, b = censored(num, unit), censored(den, unit)
    vals = {s: usable(*censored_ratio(a[s], b[s]), claim) for s in sorted(set(a) & set(b))}
    return evaluate(claim, vals, premise=premise)


def diff_claim(claim: Claim, a: dict, b: dict, premise: str | None = None, scale: float = 100.0) -> dict:
    """Evaluate ``claim`` on the per-seed difference (a - b) * ``scale`` (accuracies -> points), seeds paired."""
    if premise is None and (not a or not b):
        premise = "no completed runs of one of the two configurations"
    vals = {s: None if a[s] is None or b[s] is None else scale * (a[s] - b[s]) for s in sorted(set(a) & set(b))}
    return evaluate(claim, vals, premise=premise)


def best_rate(family: pd.DataFrame) -> tuple[float | None, str]:
    """(best rate, rule) of one configuration's rate grid (rows of several ``lr``): the fewest mean steps to
    the target among rates where every completed seed reached it and none diverged ("fewest steps"), else
    the highest mean final accuracy ("highest final accuracy"); (None, "no runs") without rows."""
    if family.empty:
        return None, "no runs"
    ok = [(g["steps"].astype(float).mean(), lr) for lr, g in family.groupby("lr")
          if g["steps"].notna().all() and (g["status"] != "diverged").all()]
    if ok:
        return min(ok)[1], "fewest steps"
    finals = [(-pd.to_numeric(g["final"], errors="coerce").mean(), lr) for lr, g in family.groupby("lr")]
    finals = [f for f in finals if not math.isnan(f[0])]
    return (min(finals)[1], "highest final accuracy") if finals else (None, "no runs")


def at_best_rate(family: pd.DataFrame) -> tuple[pd.DataFrame, float | None, str]:
    """(rows at the family's :func:`best_rate`, the rate, its rule)."""
    lr, rule = best_rate(family)
    return (family.iloc[0:0] if lr is None else select(family, lr=lr)), lr, rule


def stat(values) -> dict:
    """{"n", "mean", "std" (ddof=1), "ci_low", "ci_high"} of per-seed values (:func:`seed_interval`)."""
    return seed_interval([v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))])


def config_rows(frame: pd.DataFrame, keys: list[str], target: float, unit: str = "steps") -> list[dict]:
    """One record per configuration (``keys``): its key values, "seeds", "final" (stat of the final test
    accuracy in %), "reached" (seeds that reached the target), "to_target" (stat of steps or examples over
    the seeds that reached it), "to_target_text" ("1,200 ± 100 (3/3)", "not reached (0/3)") and
    "per_seed" {seed: {"final", "to_target"}}."""
    out = []
    if frame.empty:
        return out
    for vals, g in frame.groupby(keys, dropna=False, sort=True):
        vals = vals if isinstance(vals, tuple) else (vals,)
        reach = g[g["steps"].notna()]
        # one value per seed (several runs of a seed, e.g. a repeated configuration, are averaged)
        amount = (reach["steps"].astype(float) * (reach["m"] if unit == "examples" else 1)).groupby(
            reach["seed"]).mean()
        finals = pd.to_numeric(g["final"], errors="coerce").groupby(g["seed"]).mean()
        out.append({**{k: _native(v) for k, v in zip(keys, vals)},
                    "seeds": int(g["seed"].nunique()),
                    "final": stat(list(100 * finals)),
                    "reached": int(reach["seed"].nunique()), "to_target": stat(list(amount)), "target": target,
                    "unit": unit,
                    "to_target_text": (f"{_fmt_stat(stat(list(amount)), thousands=True)} ({reach['seed'].nunique()}/"
                                       f"{g['seed'].nunique()})" if len(reach) else
                                       f"not reached (0/{g['seed'].nunique()})"),
                    "per_seed": {int(r["seed"]): {"final": _native(r["final"]),
                                                  "to_target": None if r["steps"] is None or pd.isna(r["steps"])
                                                  else float(r["steps"] * (r["m"] if unit == "examples" else 1))}
                                 for _, r in g.iterrows()}})
    return out


def _native(v):
    """A pandas / numpy value as a Python one (NaN -> None), for report.json and the figures."""
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and math.isnan(v) else v



def _fmt_stat(st: dict, thousands: bool = False) -> str:
    if st["mean"] is None:
        return "n/a"
    f = (lambda v: f"{v:,.0f}") if thousands else (lambda v: f"{v:.2f}")
    if st["n"] == 1:
        return f"{f(st['mean'])} (1 seed)"
    return f"{f(st['mean'])} ± {f(st['std'])}"


def table_md(sec: dict) -> list[str]:
    """Markdown lines of the per-configuration table: one column per ``sec["columns"]`` entry (key, header);
    a statistic (a dict with "mean") is written "mean ± std", other values as they are."""
    rows = [[_fmt_stat(r[k], **({"thousands": True} if k == "to_target" else {})) if isinstance(r.get(k), dict)
             else _cell(r.get(k)) for k, _ in sec["columns"]] for r in sec["table"]]
    return md_table([h for _, h in sec["columns"]], rows)


def _cell(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:g}"
    return NAMES.get(v, str(v)) if isinstance(v, str) else str(v)


def study_md(sec: dict | None) -> list[str]:
    """report.md lines of the study section ([] without one)."""
    if not sec:
        return []
    wall = (f"{sec['wall_time_s'] / 60:.1f} min (scripts/study.sh's measurement)" if sec.get("wall_time_s")
            else "not recorded")
    out = [f"## Study: {sec['title']}", "", f"{sec['question']} Design, claims and pass rules, fixed before the run: "
           f"`{sec['page']}`. Runs: {sec['runs']} completed; wall time {wall}.", "",
           "### Claims", "",
           "Per-seed values, the seed mean with its percentile-bootstrap 95% interval and the sample std (ddof=1); "
           "*supported* when the whole interval lies on the claimed side of the threshold, *not supported* when "
           "it lies on the other side, *inconclusive* otherwise or with fewer than 3 seeds.", ""]
    out += claims_md(sec["claims"])
    out += ["### Per configuration", "", "Mean ± sample std (ddof=1) over seeds.", ""] + table_md(sec) + [""]
    if sec.get("findings"):
        out += ["### Findings", ""] + [f"- {f}" for f in sec["findings"]] + [""]
    out += [f"![{sec['title']}]({sec['figure']})", ""]
    return out
