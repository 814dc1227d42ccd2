"""Statistics over seeds (mean and sample std, :func:`bnexp.analysis.rules.stat`) of the per-run table's values
(:func:`value_stat`) and steps to a target (:func:`reach_stat`), and per layer the stability of Fig. 1(b, c)
(:func:`layer_stability`). Missing values are None, never made up."""

from __future__ import annotations

import math
import re
from typing import Iterable

import pandas as pd

from bnexp.report.fmt import format_steps
from bnexp.report.groups import ConfigGroup
from bnexp.analysis.runs import Sweep, numeric, ordered_keys
from bnexp.analysis.rules import Censored, optional, stat


def value_stat(values) -> dict:
    """{"mean", "std", "n", "per_seed"} over seeds of any measurement (:func:`bnexp.analysis.rules.stat`);
    missing values are None in ``per_seed``."""
    per_seed = [optional(v, lambda x: x) for v in values]
    st = stat(per_seed)
    return {"mean": st["mean"], "std": st["std"], "n": st["n"], "per_seed": per_seed}


def reach_stat(steps, first_evals=None) -> dict:
    """Steps-to-target statistics from, per seed, the step it reached the target at (None or NaN: not reached):
    {"n", "reached", "not_reached", "mean", "std", "per_seed", "at_first_eval" (how many reached it by their
    first evaluation after step 0, ``first_evals`` per seed: their steps are only upper bounds,
    :meth:`bnexp.analysis.rules.Censored.steps`), "text" (:func:`bnexp.report.fmt.format_steps`)}, mean and std in
    SGD steps over the seeds that reached it (None when none did)."""
    per_seed = [optional(s, int) for s in steps]
    firsts = [optional(f) for f in first_evals] if first_evals is not None else [None] * len(per_seed)
    st = value_stat([s for s in per_seed if s is not None])
    out = {"n": len(per_seed), "reached": st["n"], "not_reached": len(per_seed) - st["n"], "mean": st["mean"],
           "std": st["std"], "per_seed": per_seed,
           "at_first_eval": sum(1 for s, f in zip(per_seed, firsts)
                                if s is not None and Censored.steps(s, None, first_eval=f).bound == "upper")}
    return {**out, "text": format_steps(out)}


def band_keys(keys: Iterable[str]) -> tuple[str, str, str] | None:
    """(lowest, middle, highest) percentile keys among ``keys``, e.g. ("p15", "p50", "p85"); None with < 2."""
    ps = sorted((float(k[1:]), k) for k in keys if re.fullmatch(r"p\d+(\.\d*)?", k))
    return (ps[0][1], ps[len(ps) // 2][1], ps[-1][1]) if len(ps) >= 2 else None


def layer_stability(rows: pd.DataFrame) -> dict[str, dict]:
    """How each layer's input to the nonlinearity moved from the first to the last monitor record of one
    run (its shift.jsonl rows, by step), the numbers behind Fig. 1(b, c): {layer: {"median_shift":
    |p50_end - p50_first| (pre-activation units), "spread_ratio": (p85 - p15)_end / (p85 - p15)_first}},
    None where not computable (missing values, zero first spread); {} with fewer than two steps."""
    if len(rows) < 2 or rows["step"].iloc[0] == rows["step"].iloc[-1]:
        return {}
    first, out = rows.iloc[0].dropna(), {}
    for layer in ordered_keys([[c.split(".")[1] for c in first.index if c.startswith("layers.")]]):
        keys = band_keys(c.rsplit(".", 1)[1] for c in first.index if c.startswith(f"layers.{layer}."))
        if keys:
            cols = [f"layers.{layer}.{k}" for k in keys]
            (a_lo, a_mid, a_hi), (b_lo, b_mid, b_hi) = (numeric(rows.iloc[i].reindex(cols)) for i in (0, -1))
            ok = not any(math.isnan(v) for v in (a_lo, a_mid, a_hi, b_lo, b_mid, b_hi))
            out[layer] = {"median_shift": abs(b_mid - a_mid) if ok else None,
                          "spread_ratio": (b_hi - b_lo) / (a_hi - a_lo) if ok and a_hi - a_lo > 0 else None}
    return out


def config_stability(group: ConfigGroup, sweep: Sweep) -> dict[str, dict]:
    """Mean over the finished runs of :func:`layer_stability`: {layer: {"median_shift", "spread_ratio",
    "n" (seeds with values), "per_seed": {"median_shift": [...], "spread_ratio": [...]}}}."""
    per_run, out = [layer_stability(sweep.rows("shift", r)) for r in group.finished], {}
    for layer in ordered_keys(per_run):
        per_seed = {k: [s[layer][k] for s in per_run if layer in s] for k in ("median_shift", "spread_ratio")}
        out[layer] = {**{k: value_stat(v)["mean"] for k, v in per_seed.items()},
                      "n": value_stat(per_seed["median_shift"])["n"], "per_seed": per_seed}
    return out

