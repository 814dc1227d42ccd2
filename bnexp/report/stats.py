"""Statistics over seeds: steps-to-target, test accuracy, speedups, layer stability, Sec. 4.2.

"mean ± std" is over the seeds (completed runs) of a configuration, and std is the
**population** standard deviation (``numpy.std``, ddof=0), so one seed gives std 0. Steps to
a target are averaged only over the seeds that reached it; the others are counted as "not
reached (k/n)". Missing values are None, never made up.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from bnexp.report.fmt import format_multiple, format_steps
from bnexp.report.groups import ConfigGroup
from bnexp.report.load import Run, ordered_keys
from bnexp.rundir import first_reached


def target_key(target: float) -> str:
    """The key of a target in summary.json and the report: 0.95 -> "0.95"."""
    return f"{target:g}"


def steps_to_target(run: Run, target: float) -> int | None:
    """Steps the run needed to reach ``target``: summary ``steps_to_target`` if it lists the
    target, else recomputed from metrics.jsonl (Sec. 4.1). None = not reached."""
    recorded = run.summary.get("steps_to_target")
    if isinstance(recorded, dict):
        for k, v in recorded.items():
            try:
                if abs(float(k) - target) < 1e-12:
                    return None if v is None else int(v)
            except (TypeError, ValueError):
                continue
    return first_reached(run.metrics, target)


def finite(values: Iterable) -> list[float]:
    """The finite numbers among ``values`` as floats (None, booleans, NaN, inf and text left out)."""
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v)]


def mean_std(values: Iterable) -> tuple[float | None, float | None]:
    """(mean, population std with ddof=0) of the finite values; (None, None) when there are none."""
    v = finite(values)
    if not v:
        return None, None
    return float(np.mean(v)), float(np.std(v))


def value_stat(values: list[float | None]) -> dict:
    """{"mean", "std", "n", "per_seed"} over seeds of any measurement (None values left out of mean/std)."""
    m, s = mean_std(values)
    return {"mean": m, "std": s, "n": len(finite(values)), "per_seed": list(values)}


def max_accuracy(run: Run) -> float | None:
    """The run's maximum test accuracy over metrics.jsonl (else summary best_test_accuracy)."""
    accs = finite(r.get("test_accuracy") for r in run.metrics)
    if accs:
        return max(accs)
    v = finite([run.summary.get("best_test_accuracy")])
    return v[0] if v else None


def final_accuracy(run: Run) -> float | None:
    """The run's final test accuracy: summary final_test_accuracy, else the last metrics record."""
    v = finite([run.summary.get("final_test_accuracy")])
    if v:
        return v[0]
    accs = finite([run.metrics[-1].get("test_accuracy")]) if run.metrics else []
    return accs[0] if accs else None


def reach_stat(steps: list[int | None]) -> dict:
    """Steps-to-target statistics over seeds.

    Args:
        steps: per seed, the step at which the target was reached, or None.

    Returns:
        {"n", "reached", "not_reached", "mean", "std", "per_seed", "text"}; mean/std (steps)
        are over the seeds that reached the target only (None when none did).
    """
    reached = [s for s in steps if s is not None]
    m, sd = mean_std(reached)
    st = {"n": len(steps), "reached": len(reached), "not_reached": len(steps) - len(reached),
          "mean": m, "std": sd, "per_seed": list(steps)}
    st["text"] = format_steps(st)
    return st


def compute_speedup(bn: dict, no_bn: dict, no_bn_max_steps: int | None) -> dict:
    """Speedup of BN over no BN at one target (Sec. 4.1, Fig. 1a): mean no-BN steps / mean BN steps.

    Args:
        bn, no_bn: :func:`reach_stat` of the BN and the matching no-BN configuration.
        no_bn_max_steps: the no-BN runs' step budget (trainer.max_steps).

    Returns:
        {"value", "lower_bound", "text"}: the ratio when both reached the target in all
        seeds; when BN did in all seeds and no BN in none, ``max_steps / mean BN steps``
        with lower_bound true and text ">= X.Xx (lower bound)"; else value None, "n/a".
    """
    bn_all = bn["n"] > 0 and bn["reached"] == bn["n"] and (bn["mean"] or 0) > 0
    if bn_all and no_bn["n"] > 0 and no_bn["reached"] == no_bn["n"]:
        v = no_bn["mean"] / bn["mean"]
        return {"value": v, "lower_bound": False, "text": f"{v:.1f}x"}
    if bn_all and no_bn["n"] > 0 and no_bn["reached"] == 0 and no_bn_max_steps:
        v = no_bn_max_steps / bn["mean"]
        return {"value": v, "lower_bound": True, "text": f">= {v:.1f}x (lower bound)"}
    return {"value": None, "lower_bound": None, "text": "n/a"}


def band_keys(rec: dict) -> tuple[str, str, str] | None:
    """(lowest, middle, highest) percentile keys of a monitor record, e.g. ("p15", "p50", "p85")."""
    ps = []
    for k in rec:
        if k.startswith("p"):
            try:
                ps.append((float(k[1:]), k))
            except ValueError:
                pass
    if len(ps) < 2:
        return None
    ps.sort()
    return ps[0][1], ps[len(ps) // 2][1], ps[-1][1]


def layer_stability(shift: list[dict]) -> dict[str, dict]:
    """How each layer's input to the nonlinearity moved between the first and the last monitor record.

    Implements the numbers behind Fig. 1(b, c) (Sec. 4.1), per layer of ``shift.jsonl``.

    Args:
        shift: shift.jsonl records sorted by step (at least two distinct steps needed).

    Returns:
        {layer: {"median_shift": |p50_end - p50_first| (pre-activation units),
                 "spread_ratio": (p85 - p15)_end / (p85 - p15)_first}}; a value is None when
        it cannot be computed (missing keys, non-finite values, zero first spread).
        {} when there are fewer than two records.
    """
    if len(shift) < 2 or shift[0]["step"] == shift[-1]["step"]:
        return {}
    first, end = shift[0].get("layers") or {}, shift[-1].get("layers") or {}
    out = {}
    for name, a in first.items():
        b = end.get(name)
        keys = band_keys(a) if isinstance(a, dict) else None
        if not isinstance(b, dict) or keys is None:
            continue
        lo, mid, hi = keys
        vals = finite([a.get(lo), a.get(mid), a.get(hi), b.get(lo), b.get(mid), b.get(hi)])
        if len(vals) < 6:
            out[name] = {"median_shift": None, "spread_ratio": None}
            continue
        spread0 = a[hi] - a[lo]
        out[name] = {"median_shift": abs(b[mid] - a[mid]),
                     "spread_ratio": (b[hi] - b[lo]) / spread0 if spread0 > 0 else None}
    return out


def config_stability(group: ConfigGroup) -> dict[str, dict]:
    """Mean over the finished runs (seeds) of :func:`layer_stability`.

    Diverged runs are left out (their last record is not the end of training).

    Returns:
        {layer: {"median_shift": mean, "spread_ratio": mean, "n": seeds with values,
                 "per_seed": {"median_shift": [...], "spread_ratio": [...]}}}.
    """
    per_run = [layer_stability(r.shift) for r in group.runs if r.status == "finished"]
    layers = ordered_keys(per_run)
    out = {}
    for layer in layers:
        ms = [s[layer]["median_shift"] for s in per_run if layer in s]
        sr = [s[layer]["spread_ratio"] for s in per_run if layer in s]
        out[layer] = {"median_shift": mean_std(ms)[0], "spread_ratio": mean_std(sr)[0],
                      "n": len(finite(ms)), "per_seed": {"median_shift": ms, "spread_ratio": sr}}
    return out


def sec42_table(groups: list[ConfigGroup]) -> dict | None:
    """Paper Sec. 4.2 table: steps of every preset to reach the baseline's best test accuracy.

    The target is the mean over the baseline's completed seeds of each seed's maximum
    test accuracy; steps are recomputed from metrics.jsonl (first evaluation >= target).

    Returns:
        None when no configuration is named "baseline"; else {"baseline", "target",
        "target_per_seed", "rows": [{"label", "experiment", "runs", "completed", "diverged",
        "failed", "steps" (reach_stat), "multiple", "multiple_text", "max_test_accuracy"}]}
        with the baseline first. ``multiple`` = mean preset steps / mean baseline steps
        (over the seeds that reached the target), None when either has none.
    """
    presets = [g for g in groups if g.experiment]
    base = next((g for g in presets if g.experiment == "baseline"), None)
    if base is None:
        return None
    base_max = [max_accuracy(r) for r in base.completed]
    target, _ = mean_std(base_max)
    out = {"baseline": base.label, "target": target, "target_per_seed": base_max, "rows": []}
    if target is None:
        return out
    base_steps = reach_stat([first_reached(r.metrics, target) for r in base.completed])
    for g in [base] + [p for p in presets if p is not base]:
        steps = reach_stat([first_reached(r.metrics, target) for r in g.completed])
        m = (steps["mean"] / base_steps["mean"] if steps["reached"] and base_steps["reached"]
             and base_steps["mean"] > 0 else None)
        text = "1.00x (reference)" if g is base else format_multiple(m)
        if m is not None and steps["not_reached"] and g is not base:
            text += f" [over {steps['reached']}/{steps['n']} seeds]"
        out["rows"].append({
            "label": g.label, "experiment": g.experiment, "runs": len(g.runs), "completed": len(g.completed),
            "diverged": sum(r.status == "diverged" for r in g.runs),
            "failed": sum(r.status == "failed" for r in g.runs),
            "steps": steps, "multiple": m, "multiple_text": text,
            "max_test_accuracy": value_stat([max_accuracy(r) for r in g.completed]),
        })
    return out
