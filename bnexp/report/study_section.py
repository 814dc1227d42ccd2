"""The study section of ``bnexp report`` (docs/studies/README.md): a sweep of ``scripts/study.sh NAME`` -> the
study's claims, fixed in code before the run (:mod:`bnexp.report.study_claims`), each with its per-seed values,
95% Student-t interval (log ratios for ratios) and verdict (:func:`bnexp.report.claims.evaluate`), a table of the
numbers per configuration and one figure (:mod:`bnexp.report.figures_studies`, which also writes it).

A sweep folder is a study's when it holds ``study.json`` (written by scripts/study.sh) with the study's
name; report.json then has the key ``study``. The *cells* (:func:`cells`) are the completed runs of the
report's per-run table (:func:`bnexp.analysis.runs.run_table`) with the coordinates the studies vary
(normalizer, m, rate, momentum, position, nonlinearity, model, depth, seed) and their numbers.

Conventions shared by the studies (docs/studies/README.md states them for readers): *steps to a target* is
the first evaluated step whose test accuracy is >= the target; a run that never reached it counts as its
budget, a bound (:class:`bnexp.analysis.rules.Censored`); each configuration runs at its *best rate*
(:func:`bnexp.analysis.tuning.best_rate`, chosen on the seeds the claim then uses: a small optimistic bias
that applies to every configuration alike) or, held out, at the rate chosen on the tuning seeds
(:mod:`bnexp.analysis.study_runs`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from bnexp.analysis.interval import seed_interval
from bnexp.report.claims import Claim, evaluate, words
from bnexp.report.fmt import cell, format_stat, md_table
from bnexp.analysis.runs import is_number, native, read_sweep_record
from bnexp.analysis.rules import CHANCE, NORMALIZERS, Censored, optional

log = logging.getLogger("bnexp.report")

MARKER = "study.json"
CHANCE_POINTS = 100 * CHANCE  # the chance rule in percent: a "does not train" claim's threshold (study_claims.yaml)


# study.json's optional fields: how to tell a value of the right type, and what it should be
MARKER_FIELDS = {"question": (lambda v: isinstance(v, str), "a string"), "wall_time_s": (is_number, "a number"),
                 "jobs": (lambda v: is_number(v) and float(v).is_integer(), "a whole number"),
                 "calls": (lambda v: is_number(v) and float(v).is_integer(), "a whole number")}


def read_marker(sweep_dir: Path) -> dict | None:
    """The sweep's ``study.json`` ({"study": NAME, ...}), or None when absent or unreadable (a warning naming the
    file when it is there but not a JSON object with a "study" name). An optional field of the wrong type
    (:data:`MARKER_FIELDS`) is dropped with a warning naming the file and the key: the report then says it is not
    recorded."""
    path = Path(sweep_dir) / MARKER
    d = read_sweep_record(path, MARKER_FIELDS, "no study section")
    if d is not None and not isinstance(d.get("study"), str):
        log.warning('%s has no "study" name; no study section', path)
        return None
    return d


def per_seed(frame: pd.DataFrame, column: str) -> dict[int, float | None]:
    """{seed: value of ``column``} (the mean when a seed has several rows; None when missing)."""
    values = pd.to_numeric(frame[column], errors="coerce")
    return {int(seed): optional(v.dropna().mean()) for seed, v in values.groupby(frame["seed"])}


def censored(frame: pd.DataFrame, unit: str = "steps") -> dict[int, Censored]:
    """{seed: steps or examples (``unit`` "examples": times m) to the target}: a run that never reached it
    counts as its budget, a lower bound; one that reached it by its first evaluation counts as that step, an upper
    bound (:meth:`bnexp.analysis.rules.Censored.steps`)."""
    return {int(r["seed"]): Censored.steps(r["steps"], r["budget"], r["m"] if unit == "examples" else 1,
                                           r.get("first_eval"))
            for _, r in frame.iterrows()}


def ratios(num: pd.DataFrame, den: pd.DataFrame, unit: str = "steps") -> dict[int, Censored]:
    """{seed: the :func:`censored` ratio num / den}, seeds paired, in seed order."""
    a, b = censored(num, unit), censored(den, unit)
    return {s: a[s] / b[s] for s in sorted(set(a) & set(b))}


def differences(a: dict, b: dict, scale: float = 1.0) -> dict:
    """{seed: ``scale`` * (a - b)} (None where either is missing), seeds paired, in seed order."""
    return {s: None if a[s] is None or b[s] is None else scale * (a[s] - b[s]) for s in sorted(set(a) & set(b))}


def chance_seeds(claim: Claim, runs) -> list[int]:
    """The chance rule every study claim applies: the seeds whose run, in any of the frames ``runs`` (cells, the
    runs the claim's values come from), never left chance (:data:`bnexp.analysis.rules.CHANCE`); any makes the
    claim inconclusive (:func:`bnexp.report.claims.evaluate`). A claim that its quantity stays below chance ("does
    not train": threshold :data:`CHANCE_POINTS`, direction "<") applies the rule as its threshold instead, so for it
    none is returned."""
    if claim.direction == "<" and claim.threshold == CHANCE_POINTS:
        return []
    return sorted({int(s) for f in runs if len(f) for s in f.loc[~f["left_chance"].astype(bool), "seed"]})


def ratio_claim(claim: Claim, num: pd.DataFrame, den: pd.DataFrame, unit: str = "steps",
                premise: str | None = None) -> dict:
    """Evaluate ``claim`` on the per-seed :func:`ratios` num / den (log scale) with the chance rule
    (:func:`chance_seeds`); a configuration without runs makes the premise fail."""
    if premise is None and (num.empty or den.empty):
        premise = words("no_completed_runs", "pair")
    return evaluate(claim, ratios(num, den, unit), chance_seeds(claim, (num, den)), premise=premise, scale="log")


def diff_claim(claim: Claim, a: dict, b: dict, runs, premise: str | None = None, scale: float = 100.0) -> dict:
    """Evaluate ``claim`` on the per-seed :func:`differences` (a - b) * ``scale`` (accuracies -> points), with the
    chance rule on ``runs`` (the frames of cells the values come from, :func:`chance_seeds`)."""
    if premise is None and (not a or not b):
        premise = words("no_completed_runs", "pair")
    return evaluate(claim, differences(a, b, scale), chance_seeds(claim, runs), premise=premise)


def single_claim(claim: Claim, values: dict, runs, premise: str | None = None) -> dict:
    """Evaluate ``claim`` on per-seed values of one configuration, with the chance rule on ``runs`` (the frames of
    cells the values come from, :func:`chance_seeds`); none makes the premise fail."""
    return evaluate(claim, values, chance_seeds(claim, runs),
                    premise=premise or (None if values else words("no_completed_runs", "one")))


def config_rows(frame: pd.DataFrame, keys: list[str], target: float, unit: str = "steps") -> list[dict]:
    """One record per configuration (``keys``): its key values, "seeds", "final" (stat of the final test
    accuracy in %), "reached" (seeds that reached the target), "to_target" (stat of steps or examples over
    the seeds that reached it), "target", "unit", "to_target_text" ("1,200 ± 100 (3/3)", "not reached (0/3)")
    and "per_seed" {seed: {"final", "to_target"}}. A seed with several runs counts as their mean."""
    out = []
    for vals, g in frame.groupby(keys, dropna=False, sort=True):
        reach = g[g["steps"].notna()]
        amount = (reach["steps"].astype(float) * (reach["m"] if unit == "examples" else 1)).groupby(
            reach["seed"]).mean()
        to_target, n, reached = seed_interval(list(amount)), int(g["seed"].nunique()), int(reach["seed"].nunique())
        finals = pd.to_numeric(g["final"], errors="coerce").groupby(g["seed"]).mean()
        out.append({**{k: native(v) for k, v in zip(keys, vals if isinstance(vals, tuple) else (vals,))},
                    "seeds": n, "final": seed_interval(list(100 * finals)), "reached": reached,
                    "to_target": to_target, "target": target, "unit": unit,
                    "to_target_text": (f"{format_stat(to_target, '{:,.0f}', '{:,.0f}')} ({reached}/{n})" if len(reach)
                                       else cell("none_reached", n)),
                    "per_seed": {int(r["seed"]): {"final": native(r["final"]), "to_target": None if pd.isna(r["steps"])
                                                  else float(r["steps"] * (r["m"] if unit == "examples" else 1))}
                                 for _, r in g.iterrows()}})
    return out


def table_cell(key: str, value) -> str:
    """One cell of the per-configuration table (column ``key``): a statistic (a dict with "mean") written
    "mean ± std" (steps to the target without decimals, accuracies and points with two), a float as ``{:g}``, a
    normalizer code by its name (:data:`bnexp.analysis.rules.NORMALIZERS`), None as "-", other values as they are."""
    if isinstance(value, dict):
        return format_stat(value, *(["{:,.0f}"] * 2 if key == "to_target" else ["{:.2f}"] * 2))
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return NORMALIZERS.get(value, str(value)) if isinstance(value, str) else str(value)


def table_md(sec: dict) -> list[str]:
    """Markdown lines of the per-configuration table: one column per ``sec["columns"]`` entry (key, header), each
    cell :func:`table_cell`."""
    cols = sec["columns"]
    return md_table([h for _, h in cols], [[table_cell(k, r.get(k)) for k, _ in cols] for r in sec["table"]])
