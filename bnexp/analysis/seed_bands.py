"""Seeds as bands: at every evaluation step, the mean over a configuration's seeds and the 95% Student-t
interval of that mean (:func:`bnexp.analysis.interval.seed_interval`), for test accuracy, test loss, train loss
(metrics.jsonl) and the drift of the deepest hidden layer's input to g (shift.jsonl).

One computation for the two places that draw it: the report's accuracy-vs-steps figure
(:func:`bnexp.report.figures.accuracy_figure`) and the aggregate TensorBoard runs of a sweep
(:mod:`bnexp.report.aggregate`), so the figure and TensorBoard agree (docs/tensorboard.md, "over seeds").

At a step, a seed counts when it recorded a finite value there: a run that diverged (its last records are NaN,
and it records nothing after) or that has no record at that step is left out of that step, and ``n`` says how
many seeds the mean and band are over. With fewer than 2 seeds at a step there is a mean but no band.
"""

from __future__ import annotations

import math
import re
from typing import Iterable

import numpy as np
import pandas as pd

from bnexp.analysis.interval import LEVEL, seed_interval
from bnexp.analysis.runs import Run

# quantity -> (file the runs record it in, its key there or None for the drift, words for a chart title)
QUANTITIES = {
    "test_accuracy": ("metrics.jsonl", "test_accuracy", "test accuracy (fraction of the test set)"),
    "test_loss": ("metrics.jsonl", "test_loss", "test loss (cross-entropy, nats)"),
    "train_loss": ("metrics.jsonl", "train_loss", "train loss (mean over the last log_every mini-batches, nats)"),
    "drift": ("shift.jsonl", None, "drift of the deepest hidden layer's input to g: (median - initial median) / "
                                   "initial 15-85 spread"),
}
BAND_COLUMNS = ("step", "n", "mean", "low", "high")


def _finite(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def _percentile_keys(stats: dict) -> list[str]:
    """The percentile keys of a shift record's layer stats in increasing order ("p15", "p50", "p85")."""
    return sorted((k for k in stats if re.fullmatch(r"p\d+(\.\d*)?", k)), key=lambda k: float(k[1:]))


def drift_series(shift: list[dict]) -> pd.Series:
    """The drift of one run, step -> (p_mid - first p_mid) / (first p_hi - first p_lo) of its deepest hidden layer
    (the last layer of its first shift record; p_lo, p_mid, p_hi the lowest, middle and highest recorded percentiles,
    15, 50, 85 by default): how many initial 15-85 spreads the median of the input to g has moved since the first
    record (0 there; paper Sec. 4.1, Fig. 1(b, c); the value TensorBoard shows as ``shift_rel/<layer>/p50``).

    Args:
        shift: the run's shift.jsonl records, in step order.

    Returns:
        a float Series indexed by step (int), finite values only; empty without records, without percentiles or
        when the first spread is not > 0.
    """
    first = next((r for r in shift if isinstance(r.get("layers"), dict) and r["layers"]), None)
    if first is None:
        return pd.Series(dtype=float)
    deepest = list(first["layers"])[-1]
    keys = _percentile_keys(first["layers"][deepest])
    if len(keys) < 2:
        return pd.Series(dtype=float)
    lo, mid, hi = keys[0], keys[len(keys) // 2], keys[-1]
    start = {k: _finite(first["layers"][deepest].get(k)) for k in (lo, mid, hi)}
    if None in start.values() or not start[hi] - start[lo] > 0:
        return pd.Series(dtype=float)
    out = {}
    for rec in shift:
        now = _finite(((rec.get("layers") or {}).get(deepest) or {}).get(mid))
        if now is not None and _finite(rec.get("step")) is not None:
            out[int(rec["step"])] = (now - start[mid]) / (start[hi] - start[lo])
    return pd.Series(out, dtype=float).sort_index()


def per_seed(run: Run, quantity: str) -> pd.Series:
    """One run's values of ``quantity`` (a key of :data:`QUANTITIES`), step -> value, finite values only (the last
    record of a step where a resumed run recorded it twice).

    Raises:
        KeyError: an unknown quantity.
    """
    _, key, _ = QUANTITIES[quantity]
    if key is None:
        return drift_series(run.shift)
    out = {}
    for rec in run.metrics:
        step, v = _finite(rec.get("step")), _finite(rec.get(key))
        if step is not None and v is not None:
            out[int(step)] = v
    return pd.Series(out, dtype=float).sort_index()


def seed_band(runs: Iterable[Run], quantity: str, level: float = LEVEL) -> pd.DataFrame:
    """The mean over seeds and its Student-t interval at every step a seed recorded ``quantity`` at.

    Args:
        runs: the configuration's runs (one per seed; the report passes its completed runs).
        quantity: a key of :data:`QUANTITIES`.
        level: the two-sided level of the interval (0.95).

    Returns:
        a DataFrame with columns :data:`BAND_COLUMNS`, one row per step (increasing): ``n`` the seeds with a
        finite value there, ``mean`` their mean, ``low``/``high`` mean -+ t_{(1+level)/2, n-1} s / sqrt(n)
        (:func:`bnexp.analysis.interval.seed_interval`; NaN for n < 2), in the quantity's units.
    """
    series = [s for s in (per_seed(r, quantity) for r in runs) if len(s)]
    if not series:
        return pd.DataFrame({c: pd.Series(dtype=float) for c in BAND_COLUMNS}).astype({"step": int, "n": int})
    table = pd.concat(series, axis=1).sort_index()  # step x seed, NaN where a seed has no value
    rows = []
    for step, values in table.iterrows():
        st = seed_interval(values.to_numpy(), level)
        nan = float("nan")
        rows.append((int(step), int(st["n"]), st["mean"], nan if st["ci_low"] is None else st["ci_low"],
                     nan if st["ci_high"] is None else st["ci_high"]))
    return pd.DataFrame(rows, columns=list(BAND_COLUMNS)).astype({"mean": float, "low": float, "high": float})


def band_arrays(band: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, low, high) of :func:`seed_band` as float arrays (for plotting)."""
    return tuple(band[c].to_numpy(dtype=float) for c in ("step", "mean", "low", "high"))
