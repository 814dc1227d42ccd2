"""Statistics with pandas: per run (:func:`run_table`) steps-to-target and test accuracy; over seeds
(:func:`value_stat`, :func:`reach_stat`) mean and the **population** std (ddof=0, :data:`STD_NOTE`:
one seed gives std 0, written "(1 seed)"); per layer, the stability of Fig. 1(b, c)
(:func:`layer_stability`). Steps to a target are averaged over the seeds that reached it, the others
counted "not reached (k/n)". Missing values are None, never made up."""

from __future__ import annotations

import math
import re
from typing import Iterable

import numpy as np
import pandas as pd

from bnexp.report.fmt import format_steps
from bnexp.report.groups import ConfigGroup
from bnexp.report.load import Sweep, ordered_keys
from bnexp.runs.rundir import REACHED_TOL

STD_NOTE = "std is the population standard deviation over seeds (ddof=0)"


def target_key(target: float) -> str:
    """The key of a target in summary.json and the report: 0.95 -> "0.95"."""
    return f"{target:g}"


def numeric(values) -> pd.Series:
    """``values`` as a float Series: NaN for missing, non-numeric and non-finite entries."""
    s = pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").astype(float)
    return s.where(np.isfinite(s))


def optional(v, kind=float):
    """``kind(v)``, or None for a missing value (None, NaN)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else kind(v)


def value_stat(values) -> dict:
    """{"mean", "std" (ddof=0), "n", "per_seed"} over seeds of any measurement; missing and non-finite
    values are left out of mean and std (None when no value is left) and are None in ``per_seed``."""
    per_seed = [optional(v, lambda x: x) for v in values]
    s = numeric(per_seed).dropna()
    return {"mean": float(s.mean()) if len(s) else None, "std": float(s.std(ddof=0)) if len(s) else None,
            "n": len(s), "per_seed": per_seed}


def reach_stat(steps) -> dict:
    """Steps-to-target statistics over seeds from, per seed, the step it reached the target at (None or
    NaN: not reached): {"n", "reached", "not_reached", "mean", "std", "per_seed", "text"}, mean and std
    over the seeds that reached it (None when none did)."""
    per_seed = [optional(s, int) for s in steps]
    st = value_stat([s for s in per_seed if s is not None])
    out = {"n": len(per_seed), "reached": st["n"], "not_reached": len(per_seed) - st["n"], "mean": st["mean"],
           "std": st["std"], "per_seed": per_seed}
    return {**out, "text": format_steps(out)}


def first_reached(metrics: pd.DataFrame, target: float) -> pd.Series:
    """Per run (index ``run``), the first evaluated step whose test accuracy is >= ``target``
    (:data:`bnexp.runs.rundir.REACHED_TOL` tolerance); runs that never reach it are absent."""
    acc = numeric(metrics.get("test_accuracy", [])).set_axis(metrics.index)
    return metrics["step"][acc >= target - REACHED_TOL].groupby(metrics["run"]).min()


def _recorded_steps(summary: dict, target: float) -> tuple[bool, float]:
    """(listed, steps) of ``target`` in summary.json's ``steps_to_target`` (steps NaN: not reached)."""
    recorded = summary.get("steps_to_target")
    for k, v in (recorded.items() if isinstance(recorded, dict) else ()):
        try:
            if abs(float(k) - target) < 1e-12:
                return True, math.nan if v is None else int(v)
        except (TypeError, ValueError):
            continue
    return False, math.nan


def run_table(sweep: Sweep, targets: list[float]) -> pd.DataFrame:
    """The sweep's run table plus each run's ``max_test_accuracy`` (the maximum over metrics.jsonl, else
    summary ``best_test_accuracy``), ``final_test_accuracy`` (the summary's, else the last metrics
    record's), ``final_train_accuracy`` (the last metrics record with one) and ``steps_to_<target>`` for
    every target (:func:`target_steps`) (Sec. 4.1)."""
    t, m = sweep.table.copy(), sweep.metrics
    summ = {k: numeric(t.get(f"summary.{k}", pd.Series(index=t.index))).set_axis(t.index)
            for k in ("best_test_accuracy", "final_test_accuracy")}
    by_run = numeric(m.get("test_accuracy", [])).set_axis(m.index).groupby(m["run"])
    t["max_test_accuracy"] = by_run.max().reindex(t.index).fillna(summ["best_test_accuracy"])
    last = by_run.agg(lambda s: s.iloc[-1]).reindex(t.index)  # the last record's, even when missing
    t["final_test_accuracy"] = summ["final_test_accuracy"].fillna(last)
    train = numeric(m.get("train_accuracy", pd.Series(index=m.index, dtype=float))).set_axis(m.index)
    t["final_train_accuracy"] = train.groupby(m["run"]).last().reindex(t.index)
    for target in targets:
        t[f"steps_to_{target_key(target)}"] = target_steps(sweep, target)
    return t


def target_steps(sweep: Sweep, target: float) -> pd.Series:
    """Per run (index ``run``), the steps it needed to reach ``target``: summary ``steps_to_target``
    when it lists the target, else the first evaluation at or above it (NaN: not reached)."""
    recorded = [_recorded_steps(r.summary, target) for r in sweep.runs]
    computed = first_reached(sweep.metrics, target).reindex(sweep.table.index)
    return pd.Series([v if listed else c for (listed, v), c in zip(recorded, computed)], index=sweep.table.index,
                     dtype=float)


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

