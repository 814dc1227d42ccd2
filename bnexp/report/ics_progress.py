"""Gradient ICS at matched training progress (docs/ics/PLAN.md, "Matched training progress, exactly").

At the same step a fast net and a slow one are at different stages of training; these functions compare the
gradient-based ICS of Santurkar et al. (2018, Def. 2.1; ``l2_rel_per_move``) where both nets first reach the
same training loss. Pure functions over per-run records, plus :func:`progress_records` that reads those
records from a loaded sweep.

A *progress record* is ``(step, train_loss, value)``: a gradient-ICS probe's step, the training loss at that
step (the last metrics.jsonl ``train_loss`` at or before it; unitless cross-entropy, nats) and the probe's
value (``l2_rel_per_move`` averaged over layers 2..K, unitless).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

import pandas as pd

Record = tuple[int, float, float]  # (step, train_loss, value)


def _clean(records: Iterable[Sequence[float]]) -> list[Record]:
    """The records with a finite loss and value, sorted by step."""
    out = [(int(s), float(loss), float(v)) for s, loss, v in records
           if loss is not None and v is not None and math.isfinite(float(loss)) and math.isfinite(float(v))]
    return sorted(out)


def common_level(a: Iterable[Sequence[float]], b: Iterable[Sequence[float]]) -> float | None:
    """The lowest training loss both runs reach: the higher of the two runs' lowest losses over their
    records (None when either has no finite record)."""
    a, b = _clean(a), _clean(b)
    if not a or not b:
        return None
    return max(min(r[1] for r in a), min(r[1] for r in b))


def first_at_or_below(records: Iterable[Sequence[float]], level: float) -> Record | None:
    """The first record (by step) whose training loss is <= ``level``; None when no record reaches it."""
    return next((r for r in _clean(records) if r[1] <= level), None)


@dataclass(frozen=True)
class Matched:
    """The matched comparison of one pair of runs: the loss ``level`` (nats), each run's matched ``step_a``,
    ``step_b`` and gradient-ICS ``value_a``, ``value_b`` there, and ``ratio`` = value_a / value_b (None when
    value_b is 0)."""

    level: float
    step_a: int
    step_b: int
    value_a: float
    value_b: float
    ratio: float | None

    def as_dict(self) -> dict:
        """The fields as a JSON-ready dict (report.json's ``matched``)."""
        return asdict(self)


def matched_progress(a: Iterable[Sequence[float]], b: Iterable[Sequence[float]]) -> Matched | None:
    """Compare two runs' values where both first reach the same training loss: the level is
    :func:`common_level`; each run's record is :func:`first_at_or_below` that level. None when either run
    has no finite record.

    Example: a = [(1000, 1.0, 4.0), (2000, 0.5, 2.0)], b = [(1000, 2.0, 1.0), (2000, 0.8, 3.0)]: level 0.8
    (b's lowest), a first at or below it at step 2000 (value 2.0), b at 2000 (3.0): ratio 2/3.
    """
    level = common_level(a, b)
    if level is None:
        return None
    ra, rb = first_at_or_below(a, level), first_at_or_below(b, level)  # both exist: level >= each minimum
    return Matched(level, ra[0], rb[0], ra[2], rb[2], ra[2] / rb[2] if rb[2] != 0 else None)


def matched_by_seed(a: Mapping[int, Sequence[Record]], b: Mapping[int, Sequence[Record]]) -> dict[int, Matched | None]:
    """:func:`matched_progress` of seed s of ``a`` with seed s of ``b``, for every seed of either (None where a
    seed has no pair or no finite record)."""
    return {s: matched_progress(a[s], b[s]) if s in a and s in b else None for s in sorted(set(a) | set(b))}


def progress_records(metrics: pd.DataFrame, grad: pd.DataFrame, key: str = "l2_rel_per_move") -> dict[str, list[Record]]:
    """Each run's progress records (module docstring) from a sweep's metrics frame (columns run, step,
    train_loss) and the long gradient-ICS frame of layers 2..K (columns run, step, layer, key, value:
    :func:`bnexp.report.ics_stats.gradient_long`): {run id: [(step, train_loss, mean value of ``key``)]},
    runs without a probe or a training loss left out."""
    out: dict[str, list[Record]] = {}
    if grad.empty or metrics.empty or "train_loss" not in metrics:
        return out
    probes = grad[grad["key"] == key].groupby(["run", "step"])["value"].mean()
    loss = metrics[["run", "step", "train_loss"]].copy()
    loss["train_loss"] = pd.to_numeric(loss["train_loss"], errors="coerce")
    loss = loss.dropna(subset=["train_loss"]).sort_values("step")
    for run, series in probes.groupby(level="run"):
        own = loss[loss["run"] == run]
        steps, losses = own["step"].to_numpy(), own["train_loss"].to_numpy()
        recs = []
        for (_, step), value in series.items():
            at = steps <= step
            if at.any():
                recs.append((int(step), float(losses[at][-1]), float(value)))
        if recs:
            out[str(run)] = recs
    return out
