"""The measurements of internal covariate shift, one row per run (:func:`ics_run_frame`), read with pandas
from the sweep's record frames (:class:`bnexp.analysis.runs.Sweep`); docs/ics/measurements.md defines the keys.

* ``shift.<key>``, ``bn_input.<key>``: the BN paper's distribution view (shift.jsonl ``shift_metrics`` of the
  inputs to the nonlinearity, ``bn_input_shift_metrics`` of BN's input Wu), the last record's mean over the
  hidden layers; ``<key>.last``: the last hidden layer; ``*_prev`` keys: mean over the records after the first.
  Scale-free ``ks_first``, ``w1_rel_first`` beside the raw ``w1_first``; sampling-noise floors ``*_floor``.
* ``grad.<key>``: gradient-based ICS (ics.jsonl ``grad_ics``), mean over probes and layers 2..K (layer 1 is 0 by
  definition; the classifier is no hidden layer): ``l2`` = ||G - G'||_2 is Santurkar et al. 2018's Def. 2.1 as
  defined and ``one_minus_cos`` = 1 - cos(G, G') its Fig. 3 companion; ``l2_rel`` = ||G - G'|| / ||G|| and
  ``l2_rel_per_move`` (that per relative movement of the earlier layers) are normalized variants, not Def. 2.1.
* ``land.<key>``: landscape probes (Sec. 3.1; ics.jsonl ``landscape``), mean over probes: filter-normalized
  ``fn_*`` (Li et al. 2018), scale-invariant ``rel_*``, raw.
* ``time.<kind>``: summary.json ``probe_time_s`` (seconds per run).

Gradient ICS at matched training progress (:func:`matched_progress`; docs/ics/PLAN.md, "Matched training progress,
exactly") works on *progress records* ``(step, train_loss, value)``: a gradient-ICS probe's step, the training
loss there (cross-entropy, nats) and the probe's ``l2_rel_per_move`` over layers 2..K (unitless), read by
:func:`progress_records`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import pandas as pd

from bnexp.report.groups import ConfigGroup, bn_variant
from bnexp.analysis.runs import Sweep
from bnexp.report.stats import value_stat
from bnexp.runfolders.rundir import PROBE_KINDS

GRAD_KEYS = ("l2_rel_per_move", "l2_rel", "l2", "cos", "move_rel", "one_minus_cos")
LANDSCAPE_KEYS = tuple(f"{p}{k}" for p in ("fn_", "rel_", "") for k in
                       ("loss_variation", "grad_predictiveness", "beta_smoothness"))
ICS_PREFIXES = ("shift.", "bn_input.", "grad.", "land.", "time.")


def layer_long(frame: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """The columns ``<prefix>.<layer>.<key>`` of a records frame as a long frame: run, step, layer,
    key, value (floats; rows without a number left out), layers in their recorded order."""
    pat = rf"^{re.escape(prefix)}\.(?P<layer>.+)\.(?P<key>[^.]+)$"
    cols = [c for c in frame.columns if re.match(pat, c)]
    if frame.empty or not cols:
        return pd.DataFrame(columns=["run", "step", "layer", "key", "value"])
    long = frame.melt(id_vars=["run", "step"], value_vars=cols, var_name="col")
    long = long.join(long.pop("col").str.extract(pat))
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    return long.dropna(subset=["value"])


def records(ics: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The ics.jsonl records of ``kind`` ("grad_ics", "landscape")."""
    return ics[ics["kind"] == kind] if "kind" in ics else ics.iloc[:0]


def _distribution(shift: pd.DataFrame, prefix: str, tag: str) -> pd.DataFrame:
    """Per run: the last record's mean over layers and last layer (``.last``) of every key; ``*_prev``
    keys averaged over the records after the first. Runs with a single record are left out."""
    long = layer_long(shift, prefix)
    later = long[long["step"] > long.groupby("run")["step"].transform("min")]
    end = later[later["step"] == later.groupby("run")["step"].transform("max")].groupby(["run", "key"])["value"]
    mean = end.mean().unstack()
    prev = later.groupby(["run", "key"])["value"].mean().unstack().filter(regex="_prev$")
    mean[prev.columns] = prev
    return pd.concat([mean, end.last().unstack().add_suffix(".last")], axis=1).add_prefix(f"{tag}.")


def gradient_long(ics: pd.DataFrame) -> pd.DataFrame:
    """The grad_ics probes as :func:`layer_long`, layers 2..K only."""
    long = layer_long(records(ics, "grad_ics"), "layers")
    return long[(long["layer"] != long.groupby("run")["layer"].transform("first")) & (long["layer"] != "classifier")]


def ics_run_frame(sweep: Sweep) -> pd.DataFrame:
    """One row per run (index ``run``, as :attr:`Sweep.table`) with the columns of the module docstring
    (NaN where a run lacks a measure)."""
    land, grad = records(sweep.ics, "landscape"), gradient_long(sweep.ics).groupby(["run", "key"])["value"].mean()
    times = {r.id: r.summary["probe_time_s"] for r in sweep.runs if isinstance(r.summary.get("probe_time_s"), dict)}
    parts = [_distribution(sweep.shift, "shift_metrics", "shift"),
             _distribution(sweep.shift, "bn_input_shift_metrics", "bn_input"),
             grad.unstack().filter(items=GRAD_KEYS).add_prefix("grad."),
             (1.0 - grad.unstack().filter(items=["cos"])).rename(columns={"cos": "grad.one_minus_cos"}),
             land.filter(items=LANDSCAPE_KEYS).apply(pd.to_numeric, errors="coerce").groupby(land["run"]).mean()
             .add_prefix("land."),
             pd.DataFrame.from_dict(times, orient="index").filter(items=PROBE_KINDS).add_prefix("time.")]
    return pd.concat(parts, axis=1).reindex(sweep.table.index).astype(float)


def ics_summary(group: ConfigGroup, table: pd.DataFrame) -> dict | None:
    """The ICS measures of one configuration's finished runs (``table``: the report's run table with
    :func:`ics_run_frame`'s columns): None without any, else {"label", "variant", "seeds", "measures":
    {column: :func:`bnexp.report.stats.value_stat`}}."""
    rows = table[(table["group"] == group.key) & (table["status"] == "finished")]
    vals = rows[[c for c in rows if c.startswith(ICS_PREFIXES)]].dropna(axis=1, how="all")
    if vals.columns.empty:
        return None
    return {"label": group.variant_label or group.label, "variant": bn_variant(group),
            "seeds": [int(s) for s in rows["seed"].dropna()], "measures": {c: value_stat(vals[c]) for c in vals}}


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
    :func:`gradient_long`): {run id: [(step, train_loss, mean value of ``key``)]},
    runs without a probe or a training loss left out."""
    out: dict[str, list[Record]] = {}
    if grad.empty or metrics.empty or "train_loss" not in metrics:
        return out
    probes = grad[grad["key"] == key].groupby(["run", "step"])["value"].mean()
    loss = metrics[["run", "step"]].assign(train_loss=pd.to_numeric(metrics["train_loss"], errors="coerce"))
    loss = loss.dropna(subset=["train_loss"]).sort_values("step")
    for run, series in probes.groupby(level="run"):
        own = loss[loss["run"] == run]
        ends = own["step"].searchsorted(series.index.get_level_values("step"), side="right")  # loss at or before
        recs = [(int(step), float(own["train_loss"].iloc[i - 1]), float(value))
                for ((_, step), value), i in zip(series.items(), ends) if i]
        if recs:
            out[str(run)] = recs
    return out


# --- matched progress at equal learning rates (docs/ics/PLAN.md, amendment of 2026-11-29) --------------------

RATE_TOL = 0.01  # two probes' learning rates agree when they differ by at most 1% (relative)
# the ics.jsonl measures of Santurkar et al.'s Def. 2.1 and Fig. 3 (||G - G'||_2, 1 - cos(G, G')): the claims
# that read them and their words are ics_claims.yaml's
DEF21 = ("l2", "one_minus_cos")


@dataclass(frozen=True)
class Probe:
    """One gradient-ICS probe of a run: its ``step``, the learning rate there (``rate``), the evaluation loss
    there smoothed over one probe interval either side (``loss``, nats; None without evaluation records) and the
    probe's ``value`` (mean over layers 2..K of one measure)."""

    step: int
    rate: float
    loss: float | None
    value: float


def rate_at(lr: float, schedule: str, decay_rate: float, decay_steps: int, step: int) -> float:
    """The learning rate at ``step`` of a run's schedule (:func:`bnexp.train.lr_schedule.lr_lambda`, the trainer's own
    multiplier): ``lr`` x the multiplier."""
    from bnexp.train.lr_schedule import lr_lambda

    return float(lr) * float(lr_lambda(str(schedule).rsplit(".", 1)[-1], float(decay_rate), int(decay_steps))(step))


def smoothed(evals: Sequence[tuple[int, float]], step: int, half: float) -> float | None:
    """The mean evaluation loss of the records within ``half`` steps either side of ``step`` (None: none)."""
    near = [loss for s, loss in evals if abs(s - step) <= half and math.isfinite(loss)]
    return sum(near) / len(near) if near else None


@dataclass(frozen=True)
class RateMatched:
    """The equal-rate comparison of one pair of runs (a over b): the loss ``level`` (nats), each side's matched
    ``step_a``, ``step_b``, its ``rate_a``, ``rate_b`` and ``value_a``, ``value_b``, ``ratio`` = value_a /
    value_b; ``confounded``: no probe pair had equal rates, so the values are those of the rate-blind matching
    (:func:`matched_progress`'s rule on the smoothed loss) and the ratio carries no verdict."""

    level: float
    step_a: int
    step_b: int
    rate_a: float
    rate_b: float
    value_a: float
    value_b: float
    ratio: float | None
    confounded: bool


def same_rate(a: float, b: float, tol: float = RATE_TOL) -> bool:
    """Whether two learning rates agree within ``tol`` (relative)."""
    return abs(a - b) <= tol * max(abs(a), abs(b))


def matched_at_equal_rates(a: Sequence[Probe], b: Sequence[Probe], tol: float = RATE_TOL) -> RateMatched | None:
    """Compare two runs where both have reached the same evaluation loss **at the same learning rate**
    (docs/ics/PLAN.md, amendment): the candidate pairs are the probe pairs (pa, pb) whose rates agree within
    ``tol``; the level L is the higher of the two runs' lowest smoothed losses over their candidate probes; the
    matched pair is the first candidate pair (by a's step, then b's) with both losses at or below L. Without a
    candidate pair, or without one at the common level, the rate-blind matching on the smoothed loss is returned
    with ``confounded`` True. None when either run has no probe with a loss.

    Example: a constant rate on both sides makes every pair a candidate, and the result is the committed
    matching's; one decaying schedule on both sides pairs equal steps only, so a net that reaches the level
    early is compared where the other reaches it too, at that step's rate.
    """
    a = sorted((p for p in a if p.loss is not None and math.isfinite(p.value)), key=lambda p: p.step)
    b = sorted((p for p in b if p.loss is not None and math.isfinite(p.value)), key=lambda p: p.step)
    if not a or not b:
        return None
    pairs = [(pa, pb) for pa in a for pb in b if same_rate(pa.rate, pb.rate, tol)]
    if pairs:
        level = max(min(pa.loss for pa, _ in pairs), min(pb.loss for _, pb in pairs))
        ok = [(pa, pb) for pa, pb in pairs if pa.loss <= level and pb.loss <= level]
        if ok:
            pa, pb = min(ok, key=lambda q: (q[0].step, q[1].step))
            return RateMatched(level, pa.step, pb.step, pa.rate, pb.rate, pa.value, pb.value,
                               pa.value / pb.value if pb.value else None, False)
    level = max(min(p.loss for p in a), min(p.loss for p in b))
    pa, pb = next(p for p in a if p.loss <= level), next(p for p in b if p.loss <= level)
    return RateMatched(level, pa.step, pb.step, pa.rate, pb.rate, pa.value, pb.value,
                       pa.value / pb.value if pb.value else None, True)


def probe_records(metrics: pd.DataFrame, grad: pd.DataFrame, table: pd.DataFrame, key: str) -> dict[str, list[Probe]]:
    """Each run's :class:`Probe` s of measure ``key`` ("l2", "one_minus_cos" = 1 - cos, "l2_rel_per_move", ...;
    the mean over layers 2..K of :func:`gradient_long`): the rate from the run's ``lr`` and ``optim.*`` schedule
    keys in ``table`` (the per-run table; a run without ``optim.schedule`` ran at a constant rate), the loss
    from metrics.jsonl's ``test_loss`` smoothed over one probe interval (the median spacing of its probes)
    either side. {run id: probes}; runs without probes left out."""
    out: dict[str, list[Probe]] = {}
    src = "cos" if key == "one_minus_cos" else key
    if grad.empty:
        return out
    probes = grad[grad["key"] == src].groupby(["run", "step"])["value"].mean()
    if key == "one_minus_cos":
        probes = 1.0 - probes
    has_loss = not metrics.empty and "test_loss" in metrics
    for run, series in probes.groupby(level="run"):
        steps = [int(s) for s in series.index.get_level_values("step")]
        half = float(pd.Series(steps).diff().median()) if len(steps) > 1 else 0.0
        half = half if math.isfinite(half) else 0.0
        row = table.loc[run] if run in table.index else {}
        get = (lambda k, d: row[k] if k in row and not pd.isna(row[k]) else d)
        lr, sched = get("lr", math.nan), get("optim.schedule", "constant")
        rate, dr, ds = float(lr), get("optim.decay_rate", 1.0), get("optim.decay_steps", 1000)
        evals = []
        if has_loss:
            own = metrics[metrics["run"] == run]
            evals = [(int(s), float(v)) for s, v in zip(own["step"], pd.to_numeric(own["test_loss"], errors="coerce"))
                     if not pd.isna(v)]
        out[str(run)] = [Probe(s, rate_at(rate, sched, dr, ds, s), smoothed(evals, s, half), float(v))
                         for s, v in zip(steps, series.values)]
    return out
